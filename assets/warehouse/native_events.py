"""Event batch files read in Spark's Python workers by the project's native library
`event_lines` (`native/event_lines`, Rust): each task opens its piece of a file, splits
and numbers its lines as Spark's text source and `source_files.read_lines` do, and reads
every line that is an event, in one pass, where Spark's text source, the rows' trip to
Python and back, and Spark's own functions (a VARIANT parse, field look-ups, casts,
checks, `to_json`, SHA-256) cost 1M lines several seconds more.

The library reads a line only when it is an event and its every column is Spark's to
the byte: strict JSON without a key twice, a lone surrogate or a number Spark keeps as
a double (Java writes those); instants spelled `YYYY-MM-DDTHH:MM:SS[.ffffff](Z|±HH:MM)`;
no problem `events_source` would name. Its canonical payload, key and digest are written
as Spark writes them (keys in Java's order at every depth, Jackson's escapes, a long or a
decimal without trailing zeros), by hand because no library writes Spark's JSON.
Every other line keeps its `text` and is read by Spark, problems and all
(`events_source`); `tests/assets/warehouse/test_native_events.py` holds the two
readings to each other, line by line, and the lines to `read_lines`'.

A file is read in pieces that tasks read side by side: a piece holds the lines that
start in its bytes. Another task hashes the file whole. Each task reports the size and
mtime it found; once all are done the files are listed again, and a file whose size or
mtime differ between the listing, the tasks and that last listing is refused as changed
while it was read (nothing of it is staged), so the hash is that of the lines read.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO, NamedTuple

import event_lines
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from assets.source_files import Problem, SourceDataError
from resources.landing import FileStat, Fingerprint, LandingZone

READ = "read_natively"
"""True on a line the library read as an event; its `text` is then null."""
TEXTS = ("event_id", "user_id", "payload", "content_digest")
INSTANTS = ("event_timestamp", "ingestion_time")
FLAGS = ("is_deleted", "key_derived")
_UTC_MICROS = pa.timestamp("us", tz="UTC")
_LINE = pa.schema(
    [
        ("task", pa.int32()),
        ("line", pa.int32()),
        ("text", pa.string()),
        ("read_problem", pa.string()),
        (READ, pa.bool_()),
        *((name, pa.string()) for name in TEXTS),
        *((name, _UTC_MICROS) for name in INSTANTS),
        ("event_date", pa.date32()),
        *((name, pa.bool_()) for name in FLAGS),
    ]
)
"""A line of a piece: its number in the piece (from 1), and its text (not read, valid
UTF-8), its `read_problem` or its event."""
_TASK = pa.schema(
    [
        ("lines", pa.int64()),
        ("non_blank", pa.int64()),
        ("left", pa.int64()),
        ("size", pa.int64()),
        ("mtime_ms", pa.int64()),
        ("sha256", pa.string()),
    ]
)
"""What a task found, on one row whose `line` is null: a piece's lines (blank ones
included), non-blank lines and lines left to Spark (not read as events), or a file's
hash; the size and mtime (milliseconds) of the file it opened, or a size of -1 when it
was gone."""
_SCHEMA = pa.unify_schemas([_LINE, _TASK])
_SPARK_TYPES = {
    pa.int32(): "int",
    pa.int64(): "long",
    pa.string(): "string",
    pa.bool_(): "boolean",
    _UTC_MICROS: "timestamp",
    pa.date32(): "date",
}
_DDL = ", ".join(f"{field.name} {_SPARK_TYPES[field.type]}" for field in _SCHEMA)
_GONE = -1
_BOM = b"\xef\xbb\xbf"
CHUNK_BYTES = 8 << 20
"""Bytes a task reads at a time: its lines are split and read a chunk at a time."""
MIN_PIECE_BYTES, MAX_PIECE_BYTES = 4 << 20, 128 << 20
"""A piece's bounds, as Spark's file sources bound a split (`maxPartitionBytes`)."""


class Task(NamedTuple):
    """A piece of a file to read (bytes `start` to `end`), or the file to hash."""

    path: str
    """The file's absolute path."""
    start: int
    end: int
    hashes: bool


@dataclass(frozen=True)
class EventLines:
    lines: DataFrame
    """Every non-blank line: `source_file`, `source_line`, `text`, `read_problem`, `READ`
    and the event's columns (null unless `READ`)."""
    fingerprints: list[Fingerprint]
    """One per file, in path order."""
    lines_read: int
    """Non-blank lines."""
    without_lines: list[str]
    """Files without a non-blank line."""
    left: int
    """Non-blank lines the library left to Spark (not `READ`)."""


def read_files(spark: SparkSession, landing: LandingZone, files: Sequence[FileStat]) -> EventLines:
    """The lines of `files` (none empty), read and kept as read (a local checkpoint), in
    one Spark job of a task per piece and per file's hash. Raises SourceDataError
    naming every file that was gone or changed while it was read."""
    listed = sorted(files, key=lambda stat: stat.path)
    if not listed:
        raise ValueError("no files to read")
    parallelism = int(spark.conf.get("spark.sql.shuffle.partitions") or 1)
    piece = min(
        MAX_PIECE_BYTES, max(MIN_PIECE_BYTES, -(-sum(s.size for s in listed) // parallelism))
    )
    file_of: list[int] = []
    tasks: list[Task] = []
    for hashes in (True, False):  # the hashes first: each reads a whole file
        for number, stat in enumerate(listed):
            path = str(landing.absolute(stat.path))
            for start in [0] if hashes else range(0, stat.size, piece):
                file_of.append(number)
                tasks.append(Task(path, start, min(start + piece, stat.size), hashes))
    read = (
        spark.range(0, len(tasks), 1, len(tasks))
        .mapInArrow(functools.partial(_run_tasks, tuple(tasks)), _DDL)
        .localCheckpoint()
    )
    found = {
        row.task: row
        for row in read.where(F.col("line").isNull()).select("task", *_TASK.names).collect()
    }
    problems, fingerprints, lines_before = [], [], [0] * len(tasks)
    without_lines, lines_read, left = [], 0, 0
    for number, stat in enumerate(listed):
        mine = [task for task in range(len(tasks)) if file_of[task] == number]
        if any(found[task].size == _GONE for task in mine):
            problems.append(Problem(stat.path, None, "gone since it was listed"))
            continue
        after = landing.stat(stat.path)
        seen: set[tuple[int, int] | None] = {
            (found[task].size, found[task].mtime_ms) for task in mine
        }
        seen |= {_listing(stat), _listing(after)}
        if len(seen) > 1:
            problems.append(Problem(stat.path, None, "changed while it was read"))
            continue
        before = 0
        for task in mine:
            if not tasks[task].hashes:
                lines_before[task] = before
                before += found[task].lines
        non_blank = sum(found[task].non_blank for task in mine if not tasks[task].hashes)
        if not non_blank:
            without_lines.append(stat.path)
        lines_read += non_blank
        left += sum(found[task].left for task in mine if not tasks[task].hashes)
        (sha256,) = (found[task].sha256 for task in mine if tasks[task].hashes)
        mtime_ns = stat.mtime_ns // 10**6 * 10**6
        fingerprints.append(Fingerprint(stat.path, stat.size, mtime_ns, sha256))
    if problems:
        raise SourceDataError("landed", problems)
    lines = read.where(F.col("line").isNotNull()).select(
        _of_task([listed[number].path for number in file_of], "string").alias("source_file"),
        (_of_task(lines_before, "long") + F.col("line")).cast("int").alias("source_line"),
        *_LINE.names[2:],
    )
    return EventLines(lines, fingerprints, lines_read, without_lines, left)


def _listing(stat: FileStat | None) -> tuple[int, int] | None:
    """Size and mtime (milliseconds, as Spark's file sources see it) of a listed file."""
    return None if stat is None else (stat.size, stat.mtime_ns // 10**6)


def _of_task(values: Sequence[object], kind: str) -> Column:
    """Each line's value of its task: a constant array Spark folds into the plan."""
    return F.element_at(
        F.array(*(F.lit(value) for value in values)).cast(f"array<{kind}>"), F.col("task") + 1
    )


def _run_tasks(
    tasks: Sequence[Task], batches: Iterable[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The worker's side: the lines and facts of each task named by an `id` of `batches`."""
    for batch in batches:
        for number in batch.column("id").to_pylist():
            yield from _run(number, tasks[number])


def _run(number: int, task: Task) -> Iterator[pa.RecordBatch]:
    try:
        file = open(task.path, "rb")
    except FileNotFoundError:
        yield _found(number, size=_GONE)
        return
    with file:
        stat = os.fstat(file.fileno())
        facts = {"size": stat.st_size, "mtime_ms": stat.st_mtime_ns // 10**6}
        if task.hashes:
            sha256 = hashlib.file_digest(file, "sha256").hexdigest()
            yield _found(number, sha256=sha256, **facts)
            return
        lines = non_blank = left = 0
        for chunk in _pieces_lines(file, task.start, task.end):
            count, (numbers, valid), (offsets, data) = event_lines.split_lines(chunk)
            if numbers:
                batch = _lines(number, lines, numbers, valid, offsets, data)
                left += batch.num_rows - pc.sum(batch.column(READ)).as_py()
                yield batch
            lines, non_blank = lines + count, non_blank + len(numbers) // 4
        yield _found(number, lines=lines, non_blank=non_blank, left=left, **facts)


def _pieces_lines(file: BinaryIO, start: int, end: int) -> Iterator[bytes | memoryview]:
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
    """A chunk's non-blank lines (`event_lines.split_lines`), each read as an event by
    the library or left to Spark with its text."""
    rows = len(numbers) // 4
    read, texts, instants, flags = event_lines.read_events(rows, valid, offsets, data)
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
        columns[name] = pa.Array.from_buffers(_UTC_MICROS, rows, [validity, pa.py_buffer(values)])
    columns["event_date"] = pa.Array.from_buffers(
        pa.date32(), rows, [validity, pa.py_buffer(instants[2])]
    )
    for name, values in zip(FLAGS, flags, strict=True):
        columns[name] = pa.array(np.frombuffer(values, np.uint8).astype(bool), mask=~read_mask)
    for field in _TASK:
        columns[field.name] = pa.nulls(rows, field.type)
    return pa.RecordBatch.from_pydict(columns, schema=_SCHEMA)


def _found(number: int, **facts: object) -> pa.RecordBatch:
    """A task's one row of facts."""
    row: dict[str, list[object]] = {field.name: [None] for field in _SCHEMA}
    row.update({"task": [number], **{name: [value] for name, value in facts.items()}})
    return pa.RecordBatch.from_pydict(row, schema=_SCHEMA)
