"""Telemetry's heavy work on Spark (TelemetrySettings.compute), for subjects that outgrow
one process: executors read and parse the changed report files, write the raw rows, and
compute the in-hour running sums, all through the delta-spark engine.

The run's process keeps every decision, exactly as on the embedded path: which file
changes apply, the file states, the hour starts (one row per hour). The executors parse
with the same parser and sum with the same order (ts, source, line), so both paths write
the same rows.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
from pyarrow.fs import FileSystem

from assets import source_files
from assets.source_files import Problem
from assets.telemetry import control, report_files
from assets.telemetry.reconcile import COUNTS
from assets.telemetry.report_files import Parsed, ReportFileError, parse_report, unreadable
from resources import Lakehouse, LandingZone
from resources.lakehouse.frames import frame_from_arrow
from resources.lakehouse.predicates import Predicate, all_of, any_of, eq, half_open

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from assets.telemetry.derive import Pending
    from assets.telemetry.ingest import Planned

PARSED_COLUMNS = (
    "source string, line bigint, ts timestamp, in_spec bigint, out_of_spec bigint, "
    "mispicks bigint, outcome string"
)
"""What the executors' parser yields: each change's rows (outcome null), then one row
with the change's outcome (its Parsed facts, or its problems, as JSON)."""
CHANGED = "changed while it was being ingested; it is read again on the next run"
# Rows per file Spark writes, as delta-rs's 2 MiB files hold them: a replaceWhere rewrites
# whole files, so a late file's commit rewrites a few files of its span, never files
# holding much of the history (Spark's default is one file per task, of any size).
ROWS_PER_FILE = 250_000
BYTES_PER_ROW = 40
"""About what a report line takes (to size the raw table's files before parsing)."""


def _ship_parser() -> None:
    """Executors import pyspark and pyarrow but not this project: the parser's modules go
    with the function, pickled by value (a cluster then needs no copy of the code)."""
    from pyspark import cloudpickle

    for module in (sys.modules[__name__], report_files, source_files):
        cloudpickle.register_pickle_by_value(module)


class SparkRows:
    """A run's changes parsed on Spark's executors, each reading its files from the
    landing zone (a root every executor sees at the same path). The run's process reads
    a file once to fingerprint and plan it; an executor reads the planned bytes again and
    parses them, checking they are the ones planned. The parsed rows stay on the
    executors (checkpointed) until the commit writes the applied ones."""

    def __init__(self, lakehouse: Lakehouse, landing: LandingZone, latest: dt.datetime) -> None:
        self.lakehouse = lakehouse
        self.files = landing.arrow_filesystem()
        self.latest = latest
        self._planned: list[Planned] = []
        self._staged: DataFrame | None = None

    def add(self, planned: Planned, content: bytes) -> None:
        self._planned.append(planned)  # the content stays here: executors read the file

    def parsed(self) -> list[tuple[Planned, Parsed | list[Problem]]]:
        if not self._planned:
            return []
        from pyspark.sql import functions as F

        _ship_parser()
        spark = self.lakehouse.spark.session()
        self._planned.sort(key=lambda p: p.stat.path)
        # Each task partition parses consecutive files (by name) and its rows become one
        # file of the raw table: files of a source range each, of at most ROWS_PER_FILE.
        size = sum(p.change.end_byte - p.change.from_byte for p in self._planned)
        parallelism = int(spark.conf.get("spark.sql.shuffle.partitions") or 1)
        parts = max(parallelism, math.ceil(size / (ROWS_PER_FILE * BYTES_PER_ROW)))
        parts = min(parts, len(self._planned))
        tasks = pa.table(
            {
                "part": [i * parts // len(self._planned) for i in range(len(self._planned))],
                "source": [p.stat.path for p in self._planned],
                "from_byte": [p.change.from_byte for p in self._planned],
                "from_line": [p.change.from_line for p in self._planned],
                "end_byte": [p.change.end_byte for p in self._planned],
                "end_hash": [p.change.end_hash for p in self._planned],
                "old_lines": [p.old_lines for p in self._planned],
            }
        )
        files, latest = self.files, self.latest
        self._staged = (
            frame_from_arrow(spark, tasks)
            .repartitionByRange(parts, "part")
            .mapInArrow(lambda batches: parse_files(batches, files, latest), PARSED_COLUMNS)
            .localCheckpoint()
        )
        outcomes = (
            self._staged.where(F.col("outcome").isNotNull()).select("source", "outcome").toArrow()
        )
        by_source = dict(
            zip(outcomes["source"].to_pylist(), outcomes["outcome"].to_pylist(), strict=True)
        )
        return [(p, _outcome(p.stat.path, by_source[p.stat.path])) for p in self._planned]

    def rows(self, subject: str, applied: Sequence[Planned]) -> DataFrame:
        from pyspark.sql import functions as F

        assert self._staged is not None
        sources = [p.stat.path for p in applied]
        chosen = self._staged.where(F.col("outcome").isNull() & F.col("source").isin(sources))
        columns = {"subject_key": F.lit(subject)}
        return chosen.select(
            *(columns.get(name, F.col(name)).alias(name) for name in control.RAW_SCHEMA.names)
        )


def parse_files(
    batches: Iterable[pa.RecordBatch], files: tuple[FileSystem, str], latest: dt.datetime
) -> Iterator[pa.RecordBatch]:
    """On an executor: parse each planned change of `batches` (PARSED_COLUMNS), reading
    the files from `files` (a pyarrow file system and the landing root's path in it)."""
    for batch in batches:
        for task in batch.to_pylist():
            yield from _parse_file(task, files, latest)


def _parse_file(
    task: dict, files: tuple[FileSystem, str], latest: dt.datetime
) -> Iterator[pa.RecordBatch]:
    source, end = task["source"], task["end_byte"]
    filesystem, root = files
    try:
        # The planned bytes only: on an object store, one ranged request.
        with filesystem.open_input_file(f"{root}/{source}") as file:
            content = file.read_at(end, 0) if end else b""
    except OSError as error:
        yield _outcome_row(source, {"problems": [[None, unreadable(error)]]})
        return
    if len(content) < end or hashlib.sha256(content).hexdigest() != task["end_hash"]:
        yield _outcome_row(source, {"problems": [[None, CHANGED]]})
        return
    try:
        rows = parse_report(
            source,
            content[task["from_byte"] :],
            first_line=task["from_line"],
            expect_header=task["from_byte"] == 0,
            latest=latest,
        )
    except ReportFileError as error:
        problems = [[p.line, p.reason] for p in error.problems]
        yield _outcome_row(source, {"problems": problems})
        return
    n = len(rows)
    for batch in rows.table.to_batches():
        columns = {
            "source": pa.repeat(pa.scalar(source), batch.num_rows),
            **{name: batch.column(name) for name in batch.schema.names},
            "outcome": pa.nulls(batch.num_rows, pa.string()),
        }
        yield pa.RecordBatch.from_pydict(columns)
    parsed = Parsed.of(rows, task["old_lines"])
    facts = {
        "start": parsed.start.isoformat() if parsed.start else None,
        "end": parsed.end.isoformat() if parsed.end else None,
        "row_count": n,
        "replaced_lines": parsed.replaced_lines,
    }
    yield _outcome_row(source, facts)


def _outcome_row(source: str, outcome: dict) -> pa.RecordBatch:
    # Runs on executors, which have no `control` module to import (only what is
    # pickled with the parser).
    columns: dict[str, pa.Array] = {
        "source": pa.array([source]),
        "line": pa.nulls(1, pa.int64()),
        "ts": pa.nulls(1, pa.timestamp("us", tz="UTC")),
        **{name: pa.nulls(1, pa.int64()) for name in COUNTS},
        "outcome": pa.array([json.dumps(outcome)]),
    }
    return pa.RecordBatch.from_pydict(columns)


def _outcome(source: str, text: str) -> Parsed | list[Problem]:
    outcome = json.loads(text)
    if "problems" in outcome:
        return [Problem(source, line, reason) for line, reason in outcome["problems"]]
    instant = {
        k: dt.datetime.fromisoformat(outcome[k]) if outcome[k] else None for k in ("start", "end")
    }
    return Parsed(instant["start"], instant["end"], outcome["row_count"], outcome["replaced_lines"])


# -- the running totals ---------------------------------------------------------------


def pending_raw(lakehouse: Lakehouse, subject: str, pending: Pending) -> DataFrame:
    """The raw rows of `subject` in the pending hours, at the raw version they reflect."""
    selected: list[Predicate] = [eq("subject_key", subject)]
    if pending.ranges is not None:
        selected.append(any_of(half_open("ts", a, b) for a, b in pending.ranges))
    return lakehouse.read(control.RAW, version=pending.raw_version, where=all_of(selected))


def within_hour(raw: DataFrame, rows: float) -> DataFrame:
    """Each raw row with its hour and its counts summed from the start of that hour, in
    the order (ts, source, line): `reconcile.by_hour`'s in-hour rows. `rows`: about how
    many there are, to cut them into files of consecutive hours, of about ROWS_PER_FILE
    (an hour is never split: its sums are one window)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    parts = max(1, math.ceil(rows / ROWS_PER_FILE))
    hourly = raw.withColumn("hour", F.date_trunc("hour", "ts")).repartitionByRange(parts, "hour")
    so_far = (
        Window.partitionBy("hour")
        .orderBy("ts", "source", "line")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    sums = {f"hour_cum_{name}": F.sum(name).over(so_far) for name in COUNTS}
    return hourly.withColumns(sums).select(*control.WITHIN_HOUR_SCHEMA.names)


def hour_sums(raw: DataFrame) -> pa.Table:
    """Per hour of `raw`: its counts summed and its rows (one row an hour, collected)."""
    from pyspark.sql import functions as F

    sums = raw.groupBy("subject_key", F.date_trunc("hour", "ts").alias("hour")).agg(
        *(F.sum(name).alias(name) for name in COUNTS), F.count(F.lit(1)).alias("rows")
    )
    return sums.toArrow().cast(control.HOURLY_SCHEMA).sort_by([("hour", "ascending")])
