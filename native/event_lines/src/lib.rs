//! Event batch files split into lines (`split_lines`), and event lines read
//! (`read_events`), for Spark's Python workers (`event_lines.pieces`): what
//! `assets/warehouse/events_source.py` otherwise asks of Spark for each line (parse it as
//! a VARIANT, look up, type and check its fields, read its instants, write its payload
//! back as JSON, derive its key and digest), for the lines that are events and that it
//! reads as Spark does, to the byte. Every other line is left for Spark to read. And
//! the SHA-256 of each text of a column (`sha256_texts`), for the keys of `user_events`'
//! index.
//!
//! Columns come in and go out as Arrow buffers: a validity of one byte per row (0 or 1),
//! and a column of UTF-8 text as its 32-bit offsets and its bytes.

mod digests;
mod event;
mod instant;
mod json;
mod lines;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// Longer lines are Spark's to judge: its VARIANT refuses values past 16 MiB.
const MAX_LINE_BYTES: usize = 1 << 20;

/// A column of UTF-8 text being written: its offsets and bytes.
struct Texts {
    offsets: Vec<u8>,
    bytes: Vec<u8>,
}

impl Texts {
    fn new(rows: usize) -> Self {
        let mut offsets = Vec::with_capacity(4 * (rows + 1));
        offsets.extend_from_slice(&0i32.to_le_bytes());
        Texts {
            offsets,
            bytes: Vec::new(),
        }
    }

    fn push(&mut self, text: &str) -> PyResult<()> {
        self.bytes.extend_from_slice(text.as_bytes());
        let end = i32::try_from(self.bytes.len())
            .map_err(|_| PyValueError::new_err("a column of text past 2 GiB"))?;
        self.offsets.extend_from_slice(&end.to_le_bytes());
        Ok(())
    }

    fn into_py(self, py: Python<'_>) -> Column {
        (
            PyBytes::new(py, &self.offsets).unbind(),
            PyBytes::new(py, &self.bytes).unbind(),
        )
    }
}

/// The bytes a buffer holds, without copying them.
fn bytes_of(buffer: &PyBuffer<u8>) -> PyResult<&[u8]> {
    if !buffer.is_c_contiguous() {
        return Err(PyValueError::new_err("a buffer that is not contiguous"));
    }
    // SAFETY: the buffer is contiguous, of `item_count` bytes, and held (with the GIL)
    // for as long as the slice lives: the call's arguments outlive the call.
    Ok(unsafe { std::slice::from_raw_parts(buffer.buf_ptr() as *const u8, buffer.item_count()) })
}

/// The bytes of text `row` of an Arrow column of text (32-bit little-endian `offsets`,
/// which must reach row + 1, and `bytes`); None when its offsets fall outside the bytes.
fn text_at<'a>(offsets: &[u8], bytes: &'a [u8], row: usize) -> Option<&'a [u8]> {
    let offset = |row: usize| {
        let at = 4 * row;
        let word = [
            offsets[at],
            offsets[at + 1],
            offsets[at + 2],
            offsets[at + 3],
        ];
        usize::try_from(i32::from_le_bytes(word)).ok()
    };
    bytes.get(offset(row)?..offset(row + 1)?)
}

/// A column of text: its offsets and bytes.
type Column = (Py<PyBytes>, Py<PyBytes>);
/// What `read_events` returns.
type Events = (Py<PyBytes>, Vec<Column>, Vec<Py<PyBytes>>, Vec<Py<PyBytes>>);

/// Reads `rows` lines of text (Arrow buffers: `valid` one byte per row, `offsets`
/// 32-bit, `bytes`) and returns, for each line:
///
/// - `read`: 1 where the line is an event read here, 0 where Spark must read it (no
///   text, over 1 MiB, a problem, or outside what `json` and `instant` read);
/// - the texts `event_id`, `user_id`, `payload` (canonical) and `content_digest`;
/// - `event_timestamp` and `ingestion_time` (64-bit microseconds since the epoch) and
///   `event_date` (32-bit days since the epoch, the UTC date of `event_timestamp`);
/// - `is_deleted` and `key_derived` (one byte per row).
///
/// A line not read has empty texts and zeros.
#[pyfunction]
fn read_events(
    py: Python<'_>,
    rows: usize,
    valid: PyBuffer<u8>,
    offsets: PyBuffer<u8>,
    bytes: PyBuffer<u8>,
) -> PyResult<Events> {
    let (valid, offsets, bytes) = (bytes_of(&valid)?, bytes_of(&offsets)?, bytes_of(&bytes)?);
    if valid.len() < rows || offsets.len() < 4 * (rows + 1) {
        return Err(PyValueError::new_err("buffers shorter than the rows"));
    }
    let mut read = Vec::with_capacity(rows);
    let mut texts: Vec<Texts> = (0..4).map(|_| Texts::new(rows)).collect();
    let mut instants = [Vec::with_capacity(8 * rows), Vec::with_capacity(8 * rows)];
    let mut days = Vec::with_capacity(4 * rows);
    let mut flags = [Vec::with_capacity(rows), Vec::with_capacity(rows)];
    for (row, &given) in valid.iter().take(rows).enumerate() {
        let line = if given == 0 {
            None
        } else {
            let slice =
                text_at(offsets, bytes, row).ok_or_else(|| PyValueError::new_err("offsets"))?;
            Some(std::str::from_utf8(slice).map_err(|e| PyValueError::new_err(e.to_string()))?)
        };
        let found = line
            .filter(|line| line.len() <= MAX_LINE_BYTES)
            .and_then(event::read);
        read.push(u8::from(found.is_some()));
        let event = found.unwrap_or_default();
        for (column, text) in texts.iter_mut().zip([
            &event.event_id,
            &event.user_id,
            &event.payload,
            &event.content_digest,
        ]) {
            column.push(text)?;
        }
        instants[0].extend_from_slice(&event.event_timestamp.to_le_bytes());
        instants[1].extend_from_slice(&event.ingestion_time.to_le_bytes());
        let day = i32::try_from(instant::utc_day(event.event_timestamp))
            .map_err(|_| PyValueError::new_err("a day past 32 bits"))?;
        days.extend_from_slice(&day.to_le_bytes());
        flags[0].push(u8::from(event.is_deleted));
        flags[1].push(u8::from(event.key_derived));
    }
    Ok((
        PyBytes::new(py, &read).unbind(),
        texts.into_iter().map(|column| column.into_py(py)).collect(),
        [&instants[0], &instants[1], &days]
            .iter()
            .map(|values| PyBytes::new(py, values).unbind())
            .collect(),
        flags
            .iter()
            .map(|values| PyBytes::new(py, values).unbind())
            .collect(),
    ))
}

/// Splits whole lines of a file (`lines::split`) and returns how many there are, blank
/// ones included, and for each non-blank line: its number (32-bit, from 1), whether it
/// is valid UTF-8 (one byte), and its text without its ending as an Arrow column's
/// 32-bit offsets and bytes: what `read_events` takes.
#[pyfunction]
fn split_lines(py: Python<'_>, data: PyBuffer<u8>) -> PyResult<(usize, Column, Column)> {
    let lines = lines::split(bytes_of(&data)?).map_err(PyValueError::new_err)?;
    let le_bytes = |values: &[i32]| -> Vec<u8> {
        values
            .iter()
            .flat_map(|value| value.to_le_bytes())
            .collect()
    };
    let valid: Vec<u8> = lines.valid.iter().map(|&valid| u8::from(valid)).collect();
    Ok((
        lines.count,
        (
            PyBytes::new(py, &le_bytes(&lines.numbers)).unbind(),
            PyBytes::new(py, &valid).unbind(),
        ),
        (
            PyBytes::new(py, &le_bytes(&lines.offsets)).unbind(),
            PyBytes::new(py, &lines.bytes).unbind(),
        ),
    ))
}

/// The SHA-256 digest of each of `rows` texts of an Arrow column (`offsets` 32-bit, from
/// row `first`; `bytes`), 32 bytes a row, in order (`digests::of_texts`).
#[pyfunction]
fn sha256_texts(
    py: Python<'_>,
    rows: usize,
    first: usize,
    offsets: PyBuffer<u8>,
    bytes: PyBuffer<u8>,
) -> PyResult<Py<PyBytes>> {
    let digests = digests::of_texts(bytes_of(&offsets)?, bytes_of(&bytes)?, first, rows)
        .map_err(PyValueError::new_err)?;
    Ok(PyBytes::new(py, &digests).unbind())
}

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(read_events, module)?)?;
    module.add_function(wrap_pyfunction!(split_lines, module)?)?;
    module.add_function(wrap_pyfunction!(sha256_texts, module)?)?;
    Ok(())
}
