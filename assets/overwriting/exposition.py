"""The one exposition readers use: the `visits_manifest` control table maps every week
to the Delta table that holds it (its own weekly table, or a yearly table after freezing).

Readers resolve the manifest at one version and read each table filtered to the weeks the
manifest gives it, so a week being frozen, re-materialized or retired is always seen
exactly once: the swap from weekly to yearly is one MERGE commit on the manifest.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from assets.overwriting.visits_source import VISIT_COLUMNS
from resources.catalog import View
from resources.lakehouse import (
    CommitResult,
    Lakehouse,
    WhenMatchedUpdate,
    WhenNotMatchedInsert,
)
from resources.lakehouse.predicates import is_in, matches

VISITS_MANIFEST = "visits_manifest"
VISITS_WEEKLY = "visits_weekly"
"""The relation readers query: the view over the weekly and yearly tables."""
Status = Literal["active", "retired"]

_VISITS_MANIFEST_SCHEMA = pa.schema(
    [
        pa.field("week_start", pa.date32(), nullable=False),
        pa.field("table_name", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("changed_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)
EXPOSED_COLUMNS = (*VISIT_COLUMNS, "week_start")


@dataclass(frozen=True)
class ManifestEntry:
    week_start: dt.date
    table_name: str
    status: Status
    changed_at: dt.datetime


def weekly_table(monday: dt.date) -> str:
    return f"visits_weekly/week={monday.isoformat()}"


def yearly_table(year: int) -> str:
    return f"visits_weekly/year={year}"


def manifest_entries(lakehouse: Lakehouse) -> list[ManifestEntry]:
    if not lakehouse.exists(VISITS_MANIFEST):
        return []
    return [ManifestEntry(**row) for row in lakehouse.read_arrow(VISITS_MANIFEST).to_pylist()]


def active_tables(entries: Iterable[ManifestEntry]) -> dict[dt.date, str]:
    """week -> the table holding it, for every week readers see."""
    return {e.week_start: e.table_name for e in entries if e.status == "active"}


def upsert_manifest(
    lakehouse: Lakehouse, entries: Sequence[ManifestEntry], *, metadata: Mapping[str, Any]
) -> CommitResult:
    """Write `entries` (keyed by week and table) in one commit."""
    rows = pa.Table.from_pylist([e.__dict__ for e in entries], schema=_VISITS_MANIFEST_SCHEMA)
    if not lakehouse.exists(VISITS_MANIFEST):
        # Creating with the first rows; a concurrent creator makes this a commit
        # conflict, and the retry lands in the MERGE path below.
        return lakehouse.append(VISITS_MANIFEST, rows, metadata=metadata)
    result = lakehouse.merge(
        VISITS_MANIFEST,
        rows,
        on=matches("week_start", "table_name"),
        clauses=[WhenMatchedUpdate(), WhenNotMatchedInsert()],
        metadata=metadata,
    )
    # Each insert-only MERGE adds a small file; every run reads the manifest, so keep it
    # one file rather than let its read cost grow with the number of weeks.
    lakehouse.compact(VISITS_MANIFEST, metadata=metadata)
    return result


def expose_visits(lakehouse: Lakehouse) -> None:
    """The view `visits_weekly` as the manifest now stands, for the run's catalog."""
    lakehouse.expose(visits_view(manifest_entries(lakehouse)))


def exposed_table_count(lakehouse: Lakehouse) -> int:
    return len(set(active_tables(manifest_entries(lakehouse)).values()))


def weeks_by_table(entries: Iterable[ManifestEntry]) -> dict[str, list[dt.date]]:
    """table -> the weeks readers see in it, as the manifest `entries` say."""
    weeks: dict[str, list[dt.date]] = {}
    for week, table in sorted(active_tables(entries).items()):
        weeks.setdefault(table, []).append(week)
    return weeks


def visits_view(entries: Iterable[ManifestEntry]) -> View | None:
    """`visits_weekly` by name in SQL: each week from the one table the manifest
    `entries` name (None before the first week)."""
    tables = weeks_by_table(entries)
    columns = ", ".join(EXPOSED_COLUMNS)
    selects = [
        f"SELECT {columns} FROM {{{n}}} WHERE {is_in('week_start', weeks).render('spark')}"
        for n, weeks in enumerate(tables.values())
    ]
    return View(VISITS_WEEKLY, "\nUNION ALL\n".join(selects), tuple(tables)) if selects else None


def read_visits(lakehouse: Lakehouse, spark: SparkSession) -> DataFrame:
    """Every exposed visit, each week read from the one table the manifest names."""
    frames = [
        lakehouse.read(table, where=is_in("week_start", weeks)).select(*EXPOSED_COLUMNS)
        for table, weeks in weeks_by_table(manifest_entries(lakehouse)).items()
    ]
    if not frames:
        return spark.createDataFrame([], _empty_schema())
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    return union


def register_visits_view(lakehouse: Lakehouse, spark: SparkSession) -> DataFrame:
    """Expose the visits as the Spark SQL view `visits` (SELECT ... FROM visits)."""
    visits = read_visits(lakehouse, spark)
    visits.createOrReplaceTempView("visits")
    return visits


def _empty_schema() -> str:
    return (
        "visit_id string, user_id string, event_time timestamp, event_date date, page string, "
        "context string, source_file string, source_line int, week_start date"
    )
