"""SHA-256 digests of a column of text, by the Rust library (`_native`): the keys a
rebuild of `user_events`' index reads are millions, which `hashlib` hashes at 0.6 µs
each."""

from __future__ import annotations

import pyarrow as pa

from event_lines._native import sha256_texts

DIGEST = pa.binary(32)


def sha256(texts: pa.Array | pa.ChunkedArray) -> pa.FixedSizeBinaryArray:
    """The SHA-256 of each text's UTF-8 bytes, in order. Refuses nulls (a digest of
    nothing to tell apart from the digest of an empty text)."""
    column = texts.combine_chunks() if isinstance(texts, pa.ChunkedArray) else texts
    column = column.cast(pa.string())
    if column.null_count:
        raise ValueError(f"{column.null_count} null text(s) to digest")
    if not len(column):
        return pa.array([], DIGEST)
    _, offsets, data = column.buffers()
    digests = sha256_texts(len(column), column.offset, _bytes(offsets), _bytes(data))
    return pa.Array.from_buffers(DIGEST, len(column), [None, pa.py_buffer(digests)])


def _bytes(buffer: pa.Buffer | None) -> memoryview:
    """A buffer's bytes as unsigned ones, uncopied (pyarrow's say signed)."""
    return memoryview(b"") if buffer is None else memoryview(buffer).cast("B")
