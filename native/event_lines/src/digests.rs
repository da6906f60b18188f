//! SHA-256 digests of a column of text, one per row: what a key's hash is taken from
//! (`assets/warehouse/key_index.py`), for the millions of keys a rebuild of the index
//! reads, where Python's `hashlib` takes 6 s for 10M.

use sha2::{Digest, Sha256};

/// The 32-byte SHA-256 of the UTF-8 bytes of each of `rows` texts of an Arrow column
/// (32-bit little-endian `offsets`, `bytes`), from row `first` of the offsets, in order.
pub fn of_texts(
    offsets: &[u8],
    bytes: &[u8],
    first: usize,
    rows: usize,
) -> Result<Vec<u8>, String> {
    if offsets.len() < 4 * (first + rows + 1) {
        return Err("offsets shorter than the rows".to_string());
    }
    let mut digests = Vec::with_capacity(32 * rows);
    for row in first..first + rows {
        let text = crate::text_at(offsets, bytes, row)
            .ok_or_else(|| format!("offsets of row {row} outside the bytes"))?;
        digests.extend_from_slice(&Sha256::digest(text));
    }
    Ok(digests)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(texts: &[&str]) -> (Vec<u8>, Vec<u8>) {
        let mut offsets = 0i32.to_le_bytes().to_vec();
        let mut bytes = Vec::new();
        for text in texts {
            bytes.extend_from_slice(text.as_bytes());
            offsets.extend_from_slice(&(bytes.len() as i32).to_le_bytes());
        }
        (offsets, bytes)
    }

    #[test]
    fn digests_each_text_from_the_first_row_asked() {
        let (offsets, bytes) = column(&["x", "abc", ""]);
        let digests = of_texts(&offsets, &bytes, 1, 2).unwrap();
        assert_eq!(digests.len(), 64);
        // FIPS 180-2's example, and the digest of nothing.
        assert_eq!(digests[..4], [0xba, 0x78, 0x16, 0xbf]);
        assert_eq!(digests[32..36], [0xe3, 0xb0, 0xc4, 0x42]);
    }

    #[test]
    fn refuses_offsets_past_the_bytes() {
        let (offsets, _) = column(&["abc"]);
        assert!(of_texts(&offsets, b"ab", 0, 1).is_err());
        assert!(of_texts(&offsets, b"abc", 0, 2).is_err());
    }
}
