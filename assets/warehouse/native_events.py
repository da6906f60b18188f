"""Event lines read in Spark's Python workers by the project's native library
`event_lines` (`native/event_lines`, Rust), where Spark's own functions (a VARIANT parse,
field look-ups, casts, checks, `to_json`, SHA-256) cost 1M lines about 7.5 s.

The library reads a line only when it is an event and its every column is Spark's to
the byte: strict JSON without a key twice, a lone surrogate or a number Spark keeps as
a double (Java writes those); instants spelled `YYYY-MM-DDTHH:MM:SS[.ffffff](Z|±HH:MM)`;
no problem `events_source` would name. Its canonical payload, key and digest are written
as Spark writes them (keys in Java's order at every depth, Jackson's escapes, a long or a
decimal without trailing zeros), by hand because no library writes Spark's JSON.
Every other line keeps its `text` and is read by Spark, problems and all
(`events_source`); `tests/assets/warehouse/test_native_events.py` holds the two
readings to each other, line by line.
"""

from collections.abc import Iterable, Iterator

import event_lines
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

READ = "read_natively"
"""True on a line the library read as an event; its `text` is then null."""
TEXTS = ("event_id", "user_id", "payload", "content_digest")
INSTANTS = ("event_timestamp", "ingestion_time")
FLAGS = ("is_deleted", "key_derived")
ADDED_COLUMNS = ", ".join(
    [
        f"{READ} boolean",
        *(f"{name} string" for name in TEXTS),
        *(f"{name} timestamp" for name in INSTANTS),
        "event_date date",
        *(f"{name} boolean" for name in FLAGS),
    ]
)
"""The columns `read_events` adds, as a Spark DDL list."""
_UTC_MICROS = pa.timestamp("us", tz="UTC")


def read_events(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Each batch (of `read_lines`'s rows) with `ADDED_COLUMNS`: the event of each line the
    library read (`READ`), its `text` then null; null columns on the other lines."""
    for batch in batches:
        text = batch.column("text").cast(pa.string())
        rows = len(text)
        # A batch may be a slice of larger buffers: its own bytes only, offsets from 0.
        offsets = np.frombuffer(text.buffers()[1], np.int32, rows + 1, 4 * text.offset)
        data = np.frombuffer(text.buffers()[2] or b"", np.uint8)[offsets[0] : offsets[-1]]
        read, texts, numbers, flags = event_lines.read_events(
            rows,
            # A line that could not be read whole (`read_problem`) is Spark's to name.
            pc.and_(pc.is_valid(text), pc.is_null(batch.column("read_problem")))
            .to_numpy(zero_copy_only=False)
            .view(np.uint8),
            (offsets - offsets[0]).view(np.uint8),
            data,
        )
        read_mask = np.frombuffer(read, np.uint8).astype(bool)
        validity = pa.py_buffer(np.packbits(read_mask, bitorder="little"))
        columns = {name: batch.column(name) for name in batch.schema.names}
        columns["text"] = pc.if_else(read_mask, pa.scalar(None, pa.string()), text)
        columns[READ] = pa.array(read_mask)
        for name, (offsets_of, bytes_of) in zip(TEXTS, texts, strict=True):
            columns[name] = pa.Array.from_buffers(
                pa.string(), rows, [validity, pa.py_buffer(offsets_of), pa.py_buffer(bytes_of)]
            )
        for name, values in zip(INSTANTS, numbers[:2], strict=True):
            columns[name] = pa.Array.from_buffers(
                _UTC_MICROS, rows, [validity, pa.py_buffer(values)]
            )
        columns["event_date"] = pa.Array.from_buffers(
            pa.date32(), rows, [validity, pa.py_buffer(numbers[2])]
        )
        for name, values in zip(FLAGS, flags, strict=True):
            given = np.frombuffer(values, np.uint8).astype(bool)
            columns[name] = pa.array(given, mask=~read_mask)
        yield pa.RecordBatch.from_pydict(columns)
