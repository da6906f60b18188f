//! An event line read as `assets/warehouse/events_source.py` reads it (its docstring
//! gives the format, the event key and the content digest), for lines that are events:
//! a line with any problem, or outside what `json` and `instant` read, is `None`, and
//! Spark reads it, naming the problem.

use sha2::{Digest, Sha256};

use crate::instant;
use crate::json::{self, Value};

#[derive(Default)]
pub struct Event {
    /// The given `event_id`, or the derived key.
    pub event_id: String,
    pub user_id: String,
    pub event_timestamp: i64,
    pub ingestion_time: i64,
    /// The canonical payload.
    pub payload: String,
    pub is_deleted: bool,
    pub key_derived: bool,
    pub content_digest: String,
}

/// A field's text when it is a JSON string that is not blank (Spark's `trim` takes
/// spaces only).
fn not_blank<'v>(found: Option<&'v Value>) -> Option<&'v str> {
    match found {
        Some(Value::Str(text)) if !text.trim_matches(' ').is_empty() => Some(text),
        _ => None,
    }
}

fn text<'v>(value: &'v Value, field: &str) -> Option<&'v str> {
    not_blank(value.field(field))
}

/// Given (`Some(Some(text))`), absent or null (`Some(None)`), or a problem (`None`).
fn optional_text<'v>(value: &'v Value, field: &str) -> Option<Option<&'v str>> {
    match value.field(field) {
        None | Some(Value::Null) => Some(None),
        found => not_blank(found).map(Some),
    }
}

/// SHA-256 in lowercase hex, as Spark's `sha2(..., 256)` writes it.
fn sha256_hex(text: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(64);
    for byte in Sha256::digest(text.as_bytes()) {
        out.push(HEX[usize::from(byte >> 4)] as char);
        out.push(HEX[usize::from(byte & 15)] as char);
    }
    out
}

/// `to_json` of a struct of texts, as Spark writes it.
fn json_of(fields: &[(&str, &str)]) -> String {
    let mut out = String::from("{");
    for (at, (name, value)) in fields.iter().enumerate() {
        if at > 0 {
            out.push(',');
        }
        json::write_string(name, &mut out);
        out.push(':');
        json::write_string(value, &mut out);
    }
    out.push('}');
    out
}

pub fn read(line: &str) -> Option<Event> {
    let value = json::parse(line).ok()?;
    let payload = match value.field("payload") {
        Some(payload @ Value::Object(_)) => {
            let mut out = String::new();
            payload.write(&mut out);
            out
        }
        _ => return None,
    };
    let event_timestamp = instant::micros(text(&value, "event_timestamp")?)?;
    let ingestion_time = instant::micros(text(&value, "ingestion_time")?)?;
    let user_id = text(&value, "user_id")?;
    let given_id = optional_text(&value, "event_id")?;
    let op = optional_text(&value, "op")?.unwrap_or("upsert");
    if op != "upsert" && op != "delete" {
        return None;
    }
    let event_id = match given_id {
        Some(id) => id.to_string(),
        None => sha256_hex(&json_of(&[
            ("user_id", user_id),
            ("event_timestamp", &instant::utc_text(event_timestamp)),
            ("payload", &payload),
        ])),
    };
    Some(Event {
        event_id,
        user_id: user_id.to_string(),
        event_timestamp,
        ingestion_time,
        is_deleted: op == "delete",
        key_derived: given_id.is_none(),
        content_digest: sha256_hex(&json_of(&[("op", op), ("payload", &payload)])),
        payload,
    })
}
