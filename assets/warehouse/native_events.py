"""Event batch files read in Spark's Python workers by the project's native library
`event_lines` (`native/event_lines`: Rust, and the Python its workers run,
`event_lines.pieces`): each task opens its piece of a file, splits and numbers its lines
as Spark's text source and `source_files.read_lines` do, and reads every line that is an
event, in one pass, where Spark's text source, the rows' trip to
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

from collections.abc import Sequence
from dataclasses import dataclass

from event_lines import pieces
from event_lines.pieces import Task
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from assets.source_files import Problem, SourceDataError
from resources.landing import FileStat, Fingerprint, LandingZone

MIN_PIECE_BYTES, MAX_PIECE_BYTES = 4 << 20, 128 << 20
"""A piece's bounds, as Spark's file sources bound a split (`maxPartitionBytes`)."""


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
    tasks: list[Task] = []
    tasks_of_file: list[range] = []
    for stat in listed:
        of_file = pieces.tasks_of(str(landing.absolute(stat.path)), stat.size, piece)
        tasks_of_file.append(range(len(tasks), len(tasks) + len(of_file)))
        tasks += of_file
    read = pieces.read(spark, tasks)
    found = {
        row.task: row
        for row in read.where(F.col("line").isNull()).select("task", *pieces.FOUND.names).collect()
    }
    problems, fingerprints, lines_before = [], [], [0] * len(tasks)
    without_lines, lines_read, left = [], 0, 0
    for stat, mine in zip(listed, tasks_of_file, strict=True):
        failed = [found[task].problem for task in mine if found[task].problem]
        if failed:
            problems.append(Problem(stat.path, None, failed[0]))
            continue
        seen: set[tuple[int, int] | None] = {
            (found[task].size, found[task].mtime_ms) for task in mine
        }
        if seen | {_listing(landing.stat(stat.path))} != {_listing(stat)}:
            problems.append(Problem(stat.path, None, "changed while it was read"))
            continue
        (hashed,) = (found[task] for task in mine if tasks[task].hashes)
        read_pieces = [task for task in mine if not tasks[task].hashes]
        before = 0
        for task in read_pieces:
            lines_before[task], before = before, before + found[task].lines
        non_blank = sum(found[task].non_blank for task in read_pieces)
        if not non_blank:
            without_lines.append(stat.path)
        lines_read += non_blank
        left += sum(found[task].left for task in read_pieces)
        mtime_ns = stat.mtime_ns // 10**6 * 10**6
        fingerprints.append(Fingerprint(stat.path, stat.size, mtime_ns, hashed.sha256))
    if problems:
        raise SourceDataError("landed", problems)
    lines = read.where(F.col("line").isNotNull()).select(
        _of_task(
            [stat.path for stat, mine in zip(listed, tasks_of_file, strict=True) for _ in mine],
            "string",
        ).alias("source_file"),
        (_of_task(lines_before, "long") + F.col("line")).cast("int").alias("source_line"),
        *pieces.LINE.names[2:],
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
