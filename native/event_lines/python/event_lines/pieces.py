"""Event batch files read in Spark's Python workers: a task reads a piece of a file (the
lines that start in its bytes) or hashes a file whole, and hands Spark Arrow batches of
its lines, each split, numbered and read by the Rust library (`_native`): as an event
(`READ`), or left with its text (or `read_problem`) for Spark to read. Then one row of
what the task found. `assets/warehouse/native_events.py` plans the tasks and reads what
they found.

This package imports numpy, pyarrow and its library only: a worker imports it for its
first task, where the project's packages would import dagster (over a second).
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, BinaryIO, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from event_lines._native import read_events, split_lines

READ = "read_natively"
"""True on a line the library read as an event; its `text` is then null."""
TEXTS = ("event_id", "user_id", "payload", "content_digest")
INSTANTS = ("event_timestamp", "ingestion_time")
FLAGS = ("is_deleted", "key_derived")
UTC_MICROS = pa.timestamp("us", tz="UTC")
LINE = pa.schema(
    [
        ("task", pa.int32()),
        ("line", pa.int32()),
        ("text", pa.string()),
        ("read_problem", pa.string()),
        (READ, pa.bool_()),
        *((name, pa.string()) for name in TEXTS),
        *((name, UTC_MICROS) for name in INSTANTS),
        ("event_date", pa.date32()),
        *((name, pa.bool_()) for name in FLAGS),
    ]
)
"""A line of a piece: its number in the piece (from 1), and its text (not read, valid
UTF-8), its `read_problem` or its event."""
FOUND = pa.schema(
    [
        ("lines", pa.int64()),
        ("non_blank", pa.int64()),
        ("left", pa.int64()),
        ("size", pa.int64()),
        ("mtime_ms", pa.int64()),
        ("sha256", pa.string()),
        ("problem", pa.string()),
    ]
)
"""What a task found, on one row whose `line` is null: a piece's lines (blank ones
included), non-blank lines and lines left to Spark (not read as events), or a file's
hash; the size and mtime (milliseconds) of the file it opened, or why it could not open
it (`problem`)."""
SCHEMA = pa.unify_schemas([LINE, FOUND])
_SPARK_TYPES = {
    pa.int32(): "int",
    pa.int64(): "long",
    pa.string(): "string",
    pa.bool_(): "boolean",
    UTC_MICROS: "timestamp",
    pa.date32(): "date",
}
SPARK_SCHEMA = ", ".join(f"{field.name} {_SPARK_TYPES[field.type]}" for field in SCHEMA)
"""`SCHEMA` as the DDL `mapInArrow` is given."""
_BOM = b"\xef\xbb\xbf"
CHUNK_BYTES = 8 << 20
"""Bytes a task reads at a time: its lines are split and read a chunk at a time."""


class Task(NamedTuple):
    """A piece of a file to read (bytes `start` to `end`), or the file to hash."""

    path: str
    """The file's absolute path."""
    start: int
    end: int
    hashes: bool


def tasks_of(path: str, size: int, piece: int) -> list[Task]:
    """The tasks that read a file of `size` bytes in pieces of `piece` bytes, and hash it:
    the hash first, as it reads the whole file."""
    return [Task(path, 0, size, True)] + [
        Task(path, start, min(start + piece, size), False) for start in range(0, size, piece)
    ]


def read(session: Any, tasks: Sequence[Task]) -> Any:
    """The lines and facts of `tasks`, each task run in a Spark task of its own by
    `run_tasks`, kept as read (a local checkpoint): a DataFrame of `SPARK_SCHEMA` of the
    Spark `session` (classic or Connect; pyspark is not imported here)."""
    return (
        session.range(0, len(tasks), 1, len(tasks))
        .mapInArrow(functools.partial(run_tasks, tuple(tasks)), SPARK_SCHEMA)
        .localCheckpoint()
    )


def run_tasks(tasks: Sequence[Task], batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The worker's side: the lines and facts of each task named by an `id` of `batches`."""
    for batch in batches:
        for number in batch.column("id").to_pylist():
            yield from _run(number, tasks[number])


def _run(number: int, task: Task) -> Iterator[pa.RecordBatch]:
    try:
        file = open(task.path, "rb")
    except FileNotFoundError:
        yield _found(number, problem="gone since it was listed")
        return
    except OSError as error:
        yield _found(number, problem=f"cannot be read: {error.strerror}")
        return
    with file:
        stat = os.fstat(file.fileno())
        facts = {"size": stat.st_size, "mtime_ms": stat.st_mtime_ns // 10**6}
        if task.hashes:
            sha256 = hashlib.file_digest(file, "sha256").hexdigest()
            yield _found(number, sha256=sha256, **facts)
            return
        lines = non_blank = left = 0
        for chunk in _lines_of_piece(file, task.start, task.end):
            count, (numbers, valid), (offsets, data) = split_lines(chunk)
            if numbers:
                batch = _lines(number, lines, numbers, valid, offsets, data)
                left += batch.num_rows - pc.sum(batch.column(READ)).as_py()
                yield batch
            lines, non_blank = lines + count, non_blank + len(numbers) // 4
        yield _found(number, lines=lines, non_blank=non_blank, left=left, **facts)


def _lines_of_piece(file: BinaryIO, start: int, end: int) -> Iterator[bytes | memoryview]:
    """The bytes of the lines that start at `start` to `end - 1`, a chunk of whole lines
    at a time: the line under way at `start` is the piece before's, and the last one runs
    on past `end` to its line feed. A byte-order mark opening the file is dropped (as
    Hadoop's line reader drops it)."""
    at = start
    if start > 0:
        file.seek(start - 1)
        at = start - 1
        while True:
            block = file.read(CHUNK_BYTES)
            if not block:
                return
            found = block.find(b"\n")
            if found >= 0:
                at += found + 1
                file.seek(at)
                break
            at += len(block)
    pending = b""
    while at < end:
        block = file.read(CHUNK_BYTES)
        data = pending + block if pending else block
        if not block:
            if data:
                yield _without_bom(data, at)
            return
        # The piece's last line is the one holding byte `end - 1`.
        last = data.find(b"\n", max(end - 1 - at, 0)) if at + len(data) >= end else -1
        if last >= 0:
            yield _without_bom(memoryview(data)[: last + 1], at)
            return
        cut = data.rfind(b"\n") + 1
        if cut:
            yield _without_bom(memoryview(data)[:cut], at)
        pending, at = data[cut:], at + cut


def _without_bom(chunk: bytes | memoryview, at: int) -> bytes | memoryview:
    """The chunk of whole lines that starts at byte `at`, without the byte-order mark
    that opens a file."""
    return chunk[len(_BOM) :] if at == 0 and bytes(chunk[: len(_BOM)]) == _BOM else chunk


def _lines(
    number: int, before: int, numbers: bytes, valid: bytes, offsets: bytes, data: bytes
) -> pa.RecordBatch:
    """A chunk's non-blank lines (`split_lines`), each read as an event by the library or
    left to Spark with its text, numbered on from the `before` lines of the piece."""
    rows = len(numbers) // 4
    read, texts, instants, flags = read_events(rows, valid, offsets, data)
    read_mask = np.frombuffer(read, np.uint8).astype(bool)
    utf8 = np.frombuffer(valid, np.uint8).astype(bool)
    text = pa.Array.from_buffers(
        pa.string(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    validity = pa.py_buffer(np.packbits(read_mask, bitorder="little"))
    columns: dict[str, pa.Array] = {
        "task": pa.array(np.full(rows, number, np.int32)),
        "line": pa.array(np.frombuffer(numbers, np.int32) + np.int32(before)),
        # A line that is not valid UTF-8 is named by its problem, never shown.
        "text": pc.if_else(read_mask | ~utf8, pa.scalar(None, pa.string()), text),
        "read_problem": pc.if_else(utf8, pa.scalar(None, pa.string()), "not valid UTF-8"),
        READ: pa.array(read_mask),
    }
    for name, (offsets_of, bytes_of) in zip(TEXTS, texts, strict=True):
        columns[name] = pa.Array.from_buffers(
            pa.string(), rows, [validity, pa.py_buffer(offsets_of), pa.py_buffer(bytes_of)]
        )
    for name, values in zip(INSTANTS, instants[:2], strict=True):
        columns[name] = pa.Array.from_buffers(UTC_MICROS, rows, [validity, pa.py_buffer(values)])
    columns["event_date"] = pa.Array.from_buffers(
        pa.date32(), rows, [validity, pa.py_buffer(instants[2])]
    )
    for name, values in zip(FLAGS, flags, strict=True):
        columns[name] = pa.array(np.frombuffer(values, np.uint8).astype(bool), mask=~read_mask)
    for field in FOUND:
        columns[field.name] = pa.nulls(rows, field.type)
    return pa.RecordBatch.from_pydict(columns, schema=SCHEMA)


def _found(number: int, **facts: object) -> pa.RecordBatch:
    """A task's one row of facts."""
    row: dict[str, list[object]] = {field.name: [None] for field in SCHEMA}
    row.update({"task": [number], **{name: [value] for name, value in facts.items()}})
    return pa.RecordBatch.from_pydict(row, schema=SCHEMA)
