//! A file's lines as Spark's text source reads them (`read.option("lineSep", "\n")`,
//! then `assets/source_files.read_lines`): lines end at "\n" only, a "\r" that ends a
//! line is cut off (a lone "\r" is a character of its line), and a line of nothing but
//! the whitespace Java's `\s` knows is blank: counted, never read.

/// The non-blank lines of whole lines of a file, each numbered from 1 (blank ones
/// counted too) and copied without its ending into one buffer.
#[derive(Debug, Default, PartialEq)]
pub struct Lines {
    /// Every line, blank ones included.
    pub count: usize,
    /// Each non-blank line's number among all the lines.
    pub numbers: Vec<i32>,
    /// Whether each non-blank line is valid UTF-8.
    pub valid: Vec<bool>,
    /// Where each non-blank line starts in `bytes`, then where the last one ends.
    pub offsets: Vec<i32>,
    pub bytes: Vec<u8>,
}

/// Java's `\s`: what `rlike("\\S")` does not find.
fn blank(line: &[u8]) -> bool {
    line.iter()
        .all(|byte| matches!(byte, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r'))
}

/// The lines of `data`: whole lines, the last one ended by "\n" or by the end of the file.
/// Errors when the copied lines pass 2 GiB (an Arrow column's 32-bit offsets).
pub fn split(data: &[u8]) -> Result<Lines, &'static str> {
    let mut lines = Lines {
        offsets: vec![0],
        bytes: Vec::with_capacity(data.len()),
        ..Lines::default()
    };
    let mut start = 0;
    while start < data.len() {
        let end = memchr::memchr(b'\n', &data[start..]).map_or(data.len(), |at| start + at);
        let mut line = &data[start..end];
        if let [rest @ .., b'\r'] = line {
            line = rest;
        }
        lines.count += 1;
        if !blank(line) {
            let number = i32::try_from(lines.count).map_err(|_| "lines past 2^31")?;
            lines.numbers.push(number);
            lines.valid.push(std::str::from_utf8(line).is_ok());
            lines.bytes.extend_from_slice(line);
            let end = i32::try_from(lines.bytes.len()).map_err(|_| "lines past 2 GiB")?;
            lines.offsets.push(end);
        }
        start = end + 1;
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(lines: &Lines) -> Vec<(i32, bool, &[u8])> {
        (0..lines.numbers.len())
            .map(|row| {
                let (start, end) = (lines.offsets[row], lines.offsets[row + 1]);
                let text = &lines.bytes[start as usize..end as usize];
                (lines.numbers[row], lines.valid[row], text)
            })
            .collect()
    }

    #[test]
    fn lines_end_at_a_line_feed_and_blank_ones_are_counted_not_kept() {
        let lines = split(b"a\r\n \t\x0b\x0c\r\n\nb\rc\n\xe9\nlast\r").unwrap();
        assert_eq!(lines.count, 6);
        assert_eq!(
            texts(&lines),
            [
                (1, true, &b"a"[..]),
                (4, true, b"b\rc"),
                (5, false, b"\xe9"),
                (6, true, b"last"),
            ]
        );
    }

    #[test]
    fn a_final_line_feed_ends_the_last_line_and_adds_none() {
        assert_eq!(split(b"a\n").unwrap().count, 1);
        assert_eq!(split(b"a\n\n").unwrap().count, 2);
        assert_eq!(split(b"").unwrap().count, 0);
        // A no-break space is no whitespace of Java's `\s`.
        assert_eq!(texts(&split("\u{a0}".as_bytes()).unwrap()).len(), 1);
    }
}
