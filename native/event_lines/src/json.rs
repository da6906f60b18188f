//! Strict JSON (RFC 8259) read into a tree, and written back the way Spark 4.0 writes a
//! VARIANT parsed from it (`to_json(parse_json(text))`): compact, every object's keys in
//! Java's string order (UTF-16 code units), strings escaped as Jackson escapes them, and
//! numbers as the VARIANT stores them (a long, or a decimal without trailing zeros).
//!
//! Only what it reproduces byte for byte is accepted. Anything else is `Unsure`, and the
//! caller hands that line to Spark: text that is no strict JSON (Spark's parser accepts
//! trailing content, and refuses in its own words), a key given twice, a lone surrogate
//! (Spark writes it as `?`), a number Spark stores as a double (Java's `Double.toString`
//! writes it, which only the JVM reproduces), and nesting deeper than `MAX_DEPTH`.

use std::borrow::Cow;
use std::cmp::Ordering;

/// Deeper values are Spark's to judge: Jackson refuses nesting past its own limit.
const MAX_DEPTH: usize = 64;
/// A decimal's digits and scale, at most, as Spark's VARIANT keeps them (a DECIMAL(38)).
const MAX_DECIMAL_DIGITS: usize = 38;

/// Why a text is left to Spark.
#[derive(Debug)]
pub struct Unsure;

pub enum Value<'a> {
    Null,
    Bool(bool),
    /// The number as Spark writes it.
    Number(String),
    Str(Cow<'a, str>),
    Array(Vec<Value<'a>>),
    /// Fields in Java's string order of their keys, no key twice.
    Object(Vec<(Cow<'a, str>, Value<'a>)>),
}

impl<'a> Value<'a> {
    /// The field named `key` of an object.
    pub fn field(&self, key: &str) -> Option<&Value<'a>> {
        match self {
            Value::Object(fields) => fields
                .binary_search_by(|(name, _)| java_order(name, key))
                .ok()
                .map(|at| &fields[at].1),
            _ => None,
        }
    }

    /// The value as Spark writes it (`to_json`).
    pub fn write(&self, out: &mut String) {
        match self {
            Value::Null => out.push_str("null"),
            Value::Bool(true) => out.push_str("true"),
            Value::Bool(false) => out.push_str("false"),
            Value::Number(text) => out.push_str(text),
            Value::Str(text) => write_string(text, out),
            Value::Array(items) => {
                out.push('[');
                for (at, item) in items.iter().enumerate() {
                    if at > 0 {
                        out.push(',');
                    }
                    item.write(out);
                }
                out.push(']');
            }
            Value::Object(fields) => {
                out.push('{');
                for (at, (key, value)) in fields.iter().enumerate() {
                    if at > 0 {
                        out.push(',');
                    }
                    write_string(key, out);
                    out.push(':');
                    value.write(out);
                }
                out.push('}');
            }
        }
    }
}

/// Java's `String.compareTo`: by UTF-16 code units. That is the order of UTF-8's bytes
/// (the code points') but where a character above U+FFFF (a surrogate pair, from 0xD800)
/// meets one from U+E000 to U+FFFF, which it sorts before. At the first byte that tells
/// two texts apart, each holds the first byte of its character there.
fn java_order(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    match a.iter().zip(b).find(|(x, y)| x != y) {
        None => a.len().cmp(&b.len()),
        Some((&x, &y)) => {
            let pair = |lead: u8| lead >= 0xF0;
            let high = |lead: u8| (0xEE..0xF0).contains(&lead);
            if (pair(x) && high(y)) || (high(x) && pair(y)) {
                y.cmp(&x)
            } else {
                x.cmp(&y)
            }
        }
    }
}

/// Jackson's escaping: quote, backslash and control characters; nothing else. Every
/// byte escaped is ASCII, so the runs between them are copied whole.
pub fn write_string(text: &str, out: &mut String) {
    out.push('"');
    let mut run = 0;
    for (at, byte) in text.bytes().enumerate() {
        let escaped = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            0x08 => "\\b",
            b'\t' => "\\t",
            b'\n' => "\\n",
            0x0C => "\\f",
            b'\r' => "\\r",
            0x00..=0x1F => "",
            _ => continue,
        };
        out.push_str(&text[run..at]);
        if escaped.is_empty() {
            out.push_str(&format!("\\u{byte:04X}"));
        } else {
            out.push_str(escaped);
        }
        run = at + 1;
    }
    out.push_str(&text[run..]);
    out.push('"');
}

/// The JSON value `text` holds, with nothing but whitespace around it.
pub fn parse(text: &str) -> Result<Value<'_>, Unsure> {
    let mut reader = Reader {
        text,
        bytes: text.as_bytes(),
        at: 0,
    };
    reader.skip_whitespace();
    let value = reader.value(0)?;
    reader.skip_whitespace();
    if reader.at == reader.bytes.len() {
        Ok(value)
    } else {
        Err(Unsure)
    }
}

struct Reader<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), Unsure> {
        if self.peek() == Some(byte) {
            self.at += 1;
            Ok(())
        } else {
            Err(Unsure)
        }
    }

    fn literal(&mut self, word: &[u8], value: Value<'a>) -> Result<Value<'a>, Unsure> {
        if self.bytes[self.at..].starts_with(word) {
            self.at += word.len();
            Ok(value)
        } else {
            Err(Unsure)
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value<'a>, Unsure> {
        if depth > MAX_DEPTH {
            return Err(Unsure);
        }
        match self.peek().ok_or(Unsure)? {
            b'{' => self.object(depth),
            b'[' => self.array(depth),
            b'"' => Ok(Value::Str(self.string()?)),
            b't' => self.literal(b"true", Value::Bool(true)),
            b'f' => self.literal(b"false", Value::Bool(false)),
            b'n' => self.literal(b"null", Value::Null),
            _ => self.number(),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value<'a>, Unsure> {
        self.expect(b'{')?;
        let mut fields = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(Value::Object(fields));
        }
        loop {
            self.skip_whitespace();
            let key = self.string()?;
            self.skip_whitespace();
            self.expect(b':')?;
            self.skip_whitespace();
            let value = self.value(depth + 1)?;
            fields.push((key, value));
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    break;
                }
                _ => return Err(Unsure),
            }
        }
        fields.sort_by(|(a, _), (b, _)| java_order(a, b));
        if fields.windows(2).any(|pair| pair[0].0 == pair[1].0) {
            return Err(Unsure);
        }
        Ok(Value::Object(fields))
    }

    fn array(&mut self, depth: usize) -> Result<Value<'a>, Unsure> {
        self.expect(b'[')?;
        let mut items = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.skip_whitespace();
            items.push(self.value(depth + 1)?);
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(Unsure),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, Unsure> {
        let text = self.text.get(self.at..self.at + 4).ok_or(Unsure)?;
        if !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Unsure);
        }
        self.at += 4;
        u32::from_str_radix(text, 16).map_err(|_| Unsure)
    }

    /// A string: borrowed from the text where it holds no escape.
    fn string(&mut self) -> Result<Cow<'a, str>, Unsure> {
        self.expect(b'"')?;
        let mut out: Option<String> = None;
        loop {
            let start = self.at;
            while let Some(byte) = self.peek() {
                if byte == b'"' || byte == b'\\' || byte < 0x20 {
                    break;
                }
                self.at += 1;
            }
            // A run stops only at ASCII bytes, so it ends on a character's boundary.
            let run = &self.text[start..self.at];
            match self.peek().ok_or(Unsure)? {
                b'"' => {
                    self.at += 1;
                    return Ok(match out {
                        None => Cow::Borrowed(run),
                        Some(mut text) => {
                            text.push_str(run);
                            Cow::Owned(text)
                        }
                    });
                }
                b'\\' => {
                    self.at += 1;
                    let escaped = self.peek().ok_or(Unsure)?;
                    self.at += 1;
                    let ch = match escaped {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{08}',
                        b'f' => '\u{0C}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.escaped_char()?,
                        _ => return Err(Unsure),
                    };
                    let text = out.get_or_insert_with(String::new);
                    text.push_str(run);
                    text.push(ch);
                }
                _ => return Err(Unsure), // a raw control character
            }
        }
    }

    /// The character of a `\u` escape (read past the `u`), joining a surrogate pair;
    /// a lone surrogate is Unsure.
    fn escaped_char(&mut self) -> Result<char, Unsure> {
        let unit = self.hex4()?;
        if (0xD800..0xDC00).contains(&unit) {
            if self.bytes.get(self.at..self.at + 2) != Some(b"\\u") {
                return Err(Unsure);
            }
            self.at += 2;
            let low = self.hex4()?;
            if !(0xDC00..0xE000).contains(&low) {
                return Err(Unsure);
            }
            char::from_u32(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)).ok_or(Unsure)
        } else {
            char::from_u32(unit).ok_or(Unsure)
        }
    }

    /// A number as Spark's VARIANT keeps it: an integer that fits 64 bits is a long;
    /// any other number without an exponent whose digits and scale fit 38 is a decimal,
    /// written without trailing zeros (`2.50` is `2.5`, `-0.0` is `0`); the rest (an
    /// exponent, more digits) Spark stores as a double: Unsure.
    fn number(&mut self) -> Result<Value<'a>, Unsure> {
        let start = self.at;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.at += 1;
        }
        let integer = self.digits();
        if integer.is_empty() || (integer.len() > 1 && integer.starts_with('0')) {
            return Err(Unsure);
        }
        let mut fraction = "";
        if self.peek() == Some(b'.') {
            self.at += 1;
            fraction = self.digits();
            if fraction.is_empty() {
                return Err(Unsure);
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            return Err(Unsure);
        }
        let sign = if negative { "-" } else { "" };
        if fraction.is_empty() {
            let text = &self.text[start..self.at];
            if text.parse::<i64>().is_ok() {
                let text = if text == "-0" { "0" } else { text };
                return Ok(Value::Number(text.to_string()));
            }
        }
        // BigDecimal's precision: the digits of the unscaled value, leading zeros aside.
        let digits = integer.bytes().chain(fraction.bytes());
        let significant = digits.skip_while(|&d| d == b'0').count().max(1);
        if significant > MAX_DECIMAL_DIGITS || fraction.len() > MAX_DECIMAL_DIGITS {
            return Err(Unsure);
        }
        let fraction = fraction.trim_end_matches('0');
        let text = match (integer == "0" && fraction.is_empty(), fraction.is_empty()) {
            (true, _) => "0".to_string(),
            (false, true) => format!("{sign}{integer}"),
            (false, false) => format!("{sign}{integer}.{fraction}"),
        };
        Ok(Value::Number(text))
    }

    fn digits(&mut self) -> &'a str {
        let start = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        &self.text[start..self.at]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(text: &str) -> Option<String> {
        parse(text).ok().map(|value| {
            let mut out = String::new();
            value.write(&mut out);
            out
        })
    }

    #[test]
    fn numbers_are_written_as_spark_stores_them() {
        assert_eq!(canonical("-0").as_deref(), Some("0"));
        assert_eq!(canonical("2.50").as_deref(), Some("2.5"));
        assert_eq!(canonical("-0.0").as_deref(), Some("0"));
        assert_eq!(canonical("100.00").as_deref(), Some("100"));
        assert_eq!(
            canonical("9223372036854775808").as_deref(),
            Some("9223372036854775808")
        );
        assert!(canonical("1e2").is_none());
        assert!(canonical("01").is_none());
    }

    #[test]
    fn keys_sort_in_java_order_and_twice_is_unsure() {
        assert_eq!(
            canonical("{\"\u{FFFF}\":1,\"\u{1F600}\":2,\"b\":{\"d\":1,\"c\":2}}").as_deref(),
            Some("{\"b\":{\"c\":2,\"d\":1},\"\u{1F600}\":2,\"\u{FFFF}\":1}")
        );
        assert!(canonical("{\"a\":{\"x\":1,\"x\":2}}").is_none());
        let keys = [
            "",
            "a",
            "ab",
            "b",
            "\u{E000}",
            "\u{FFFF}",
            "\u{10000}",
            "\u{1F600}",
            "é",
        ];
        for a in keys {
            for b in keys {
                let utf16 = a.encode_utf16().cmp(b.encode_utf16());
                assert_eq!(java_order(a, b), utf16, "{a:?} against {b:?}");
            }
        }
    }

    #[test]
    fn strings_are_escaped_as_jackson_escapes_them() {
        assert_eq!(
            canonical(r#""\u0000\/\u001f\b\t\u007f\ud83d\ude00""#).as_deref(),
            Some("\"\\u0000/\\u001F\\b\\t\u{7f}\u{1F600}\"")
        );
        assert!(canonical(r#""\ud800""#).is_none());
        assert!(canonical("{\"a\":1} x").is_none());
    }
}
