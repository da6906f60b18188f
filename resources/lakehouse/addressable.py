"""Rows of Parquet files picked out by the values of one column, reading the values
asked for only, where the files allow it.

A lookup of 10k keys among 10M rows needs about one row in a thousand. A Parquet reader
decodes whole column chunks (pyarrow has no row selection), so that lookup would cost a
read of every column of every row. Files written *addressable* (uncompressed, PLAIN
encoding, one data page per column chunk: `COMPRESSION`, `PAGE_LIMIT`) hold each
fixed-width column chunk as its values end to end, at the end of the chunk: value i of a
chunk of n rows lies at `end - width * (n - i)`. Mapped into memory, a column is then an array
whose values are read where they are needed, no page decoded around them. When the
column searched is sorted in a row group (the index writes it so), its rows are found by
binary search too.

Every chunk is checked before it is addressed (compression, encodings, no dictionary,
no nulls, and the page header's size holding every value); a chunk that fails any check
is read whole by pyarrow, so any Parquet file gives the same rows, only slower.
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

COMPRESSION: Final = "UNCOMPRESSED"
PAGE_LIMIT = 1 << 30
"""An addressable file's writer: no compression, no dictionary, and page limits (bytes and
rows) that no column chunk reaches, so each chunk is one page (`delta_rs` writes so)."""
_PLAIN_ENCODINGS = frozenset({"PLAIN", "RLE", "BIT_PACKED"})
"""Encodings of an addressable chunk: PLAIN values, levels in RLE (or its old form)."""
_NUMPY: dict[int, np.dtype[Any]] = {8: np.dtype("<i8"), 4: np.dtype("<i4")}


def rows_among(
    path: str | Path,
    schema: pa.Schema,
    column: str,
    values: np.ndarray,
    columns: Sequence[str],
) -> pa.Table:
    """`columns` (of `schema`, the table's) of the rows of the file at `path` whose
    `column` (64-bit integers) holds one of `values` (sorted, unique), in file order."""
    parts = []
    data = _mapped(path)
    with pq.ParquetFile(path, memory_map=True) as parquet:
        metadata = parquet.metadata
        names = [metadata.schema.column(i).name for i in range(metadata.num_columns)]
        stored = parquet.schema_arrow
        for group in range(metadata.num_row_groups):
            rows = metadata.row_group(group)

            def chunk(name: str, group: int = group, rows: pq.RowGroupMetaData = rows) -> pa.Array:
                type_ = schema.field(name).type
                same = _same_values(stored.field(name).type, type_)
                array = _addressed(data, rows, names.index(name), type_) if same else None
                if array is None:
                    read = parquet.read_row_group(group, columns=[name], use_threads=False)
                    array = read.column(0).combine_chunks().cast(schema.field(name).type)
                return array

            keys = chunk(column)
            at = _positions(keys, values)
            if len(at):
                taken = pa.array(at)
                parts.append(pa.table({name: chunk(name).take(taken) for name in columns}))
    if not parts:
        return pa.schema([schema.field(name) for name in columns]).empty_table()
    return pa.concat_tables(parts)


def _same_values(stored: pa.DataType, wanted: pa.DataType) -> bool:
    """Whether a file's column holds its values as the table's type says (a timestamp's
    zone aside: the instant is the same)."""
    if pa.types.is_timestamp(stored) and pa.types.is_timestamp(wanted):
        return stored.unit == wanted.unit
    return stored == wanted


def _positions(keys: pa.Array, values: np.ndarray) -> np.ndarray:
    """The positions in `keys` of the values among `values`, in order: by binary search
    when `keys` is sorted, by a hash set otherwise."""
    found = keys.to_numpy(zero_copy_only=False)
    if len(found) and bool(np.all(found[:-1] <= found[1:])):
        low = np.searchsorted(found, values, side="left")
        high = np.searchsorted(found, values, side="right")
        counts = high - low
        before = np.repeat(np.cumsum(counts) - counts, counts)
        return np.repeat(low, counts) + np.arange(int(counts.sum()), dtype=np.int64) - before
    mask = pc.is_in(keys, value_set=pa.array(values))
    return pc.indices_nonzero(mask).to_numpy()


def _addressed(
    data: mmap.mmap | None, rows: pq.RowGroupMetaData, index: int, type_: pa.DataType
) -> pa.Array | None:
    """The values of a column chunk, read in place, as `type_`; None when the chunk is
    not addressable (see the module's docstring)."""
    if data is None or not pa.types.is_primitive(type_) or pa.types.is_boolean(type_):
        return None
    width = type_.bit_width // 8
    chunk, count = rows.column(index), rows.num_rows
    statistics = chunk.statistics
    if (
        width not in _NUMPY
        or chunk.compression != "UNCOMPRESSED"
        or chunk.has_dictionary_page
        or not set(chunk.encodings) <= _PLAIN_ENCODINGS
        or chunk.num_values != count
        or statistics is None
        or not statistics.has_null_count
        or statistics.null_count != 0
        or chunk.physical_type not in ("INT32", "INT64", "FLOAT", "DOUBLE")
    ):
        return None
    start, end = chunk.data_page_offset, chunk.data_page_offset + chunk.total_compressed_size
    if _page_size(data, start) < width * count or end > len(data):
        return None
    values = np.frombuffer(data, dtype=_NUMPY[width], count=count, offset=end - width * count)
    return pa.Array.from_buffers(type_, count, [None, pa.py_buffer(values)])


def _page_size(data: mmap.mmap, at: int) -> int:
    """The size of the data page whose header opens at `at` (Thrift's compact protocol:
    field 1, the page's type, a data page of either version; then its uncompressed and
    its compressed size, equal in an uncompressed chunk); 0 for anything else."""
    sizes = []
    for field_header in (0x15, 0x15, 0x15):
        if at >= len(data) or data[at] != field_header:
            return 0
        value, at = _varint(data, at + 1)
        sizes.append((value >> 1) ^ -(value & 1))
    kind, uncompressed, compressed = sizes
    return compressed if kind in (0, 3) and uncompressed == compressed else 0


def _varint(data: mmap.mmap, at: int) -> tuple[int, int]:
    value = shift = 0
    while at < len(data):
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7
    return 0, at


def _mapped(path: str | Path) -> mmap.mmap | None:
    """The file at `path` mapped into memory for reading (None when empty). Left to the
    garbage collector: the arrays read in place hold on to it."""
    with open(path, "rb") as handle:
        if not handle.seek(0, 2):
            return None
        return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
