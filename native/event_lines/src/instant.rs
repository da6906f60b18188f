//! ISO-8601 instants in the one spelling senders use most, read as Spark's cast of text to
//! a timestamp reads them: `YYYY-MM-DDTHH:MM:SS`, an optional fraction of up to six
//! digits, then `Z` or `+HH:MM` / `-HH:MM`. Any other spelling (a space for the `T`, an
//! offset without its colon, nanoseconds, a leap second, a year before 1000) is Spark's to
//! read: `None`.

const MICROS_PER_SECOND: i64 = 1_000_000;
const SECONDS_PER_DAY: i64 = 86_400;

/// Microseconds since 1970-01-01T00:00:00Z.
pub fn micros(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let year = number(&b[0..4])?;
    let (month, day) = (number(&b[5..7])?, number(&b[8..10])?);
    let (hour, minute, second) = (
        number(&b[11..13])?,
        number(&b[14..16])?,
        number(&b[17..19])?,
    );
    if year < 1000 || !(1..=12).contains(&month) || day < 1 || day > days_in(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let mut at = 19;
    let mut fraction = 0;
    if b[at] == b'.' {
        let digits = b[at + 1..]
            .iter()
            .take_while(|d| d.is_ascii_digit())
            .count();
        if digits == 0 || digits > 6 {
            return None;
        }
        fraction = number(&b[at + 1..at + 1 + digits])? * 10_i64.pow((6 - digits) as u32);
        at += 1 + digits;
    }
    let offset = match &b[at..] {
        b"Z" => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let (hours, minutes) = (number(&[*h1, *h2])?, number(&[*m1, *m2])?);
            if hours > 17 || minutes > 59 {
                return None;
            }
            let seconds = hours * 3600 + minutes * 60;
            if *sign == b'-' {
                -seconds
            } else {
                seconds
            }
        }
        _ => return None,
    };
    let seconds =
        days_from_civil(year, month, day) * SECONDS_PER_DAY + hour * 3600 + minute * 60 + second
            - offset;
    Some(seconds * MICROS_PER_SECOND + fraction)
}

/// The instant as `yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'` in UTC (`events_source.UTC_MICROS`).
pub fn utc_text(micros: i64) -> String {
    let seconds = micros.div_euclid(MICROS_PER_SECOND);
    let fraction = micros.rem_euclid(MICROS_PER_SECOND);
    let days = seconds.div_euclid(SECONDS_PER_DAY);
    let of_day = seconds.rem_euclid(SECONDS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{fraction:06}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// Days since 1970-01-01 of the instant's UTC date.
pub fn utc_day(micros: i64) -> i64 {
    micros.div_euclid(MICROS_PER_SECOND * SECONDS_PER_DAY)
}

fn number(digits: &[u8]) -> Option<i64> {
    digits.iter().try_fold(0_i64, |n, &d| {
        d.is_ascii_digit().then(|| n * 10 + i64::from(d - b'0'))
    })
}

fn days_in(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Howard Hinnant's `days_from_civil` (proleptic Gregorian, as Spark's dates are).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_are_read_in_utc() {
        assert_eq!(micros("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(micros("1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(
            micros("2024-02-29T23:59:59.5-00:30"),
            Some(1_709_252_999_500_000)
        );
        assert_eq!(
            utc_text(micros("2024-05-01T00:30:00.000001+02:00").unwrap()),
            "2024-04-30T22:30:00.000001Z"
        );
        assert_eq!(utc_day(micros("1969-12-31T23:59:59Z").unwrap()), -1);
    }

    #[test]
    fn other_spellings_are_left_to_spark() {
        for text in [
            "2024-02-30T00:00:00Z",
            "2024-01-01 00:00:00Z",
            "2024-01-01T00:00:00+0100",
            "2024-01-01T00:00:60Z",
            "2024-01-01T00:00:00.1234567Z",
            "2024-01-01T00:00:00",
            "2024-01-01T00:00:00Z ",
            "0999-01-01T00:00:00Z",
        ] {
            assert_eq!(micros(text), None, "{text}");
        }
    }
}
