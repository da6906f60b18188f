"""Stateful Merger: `device_catalog`, where a backfill restores the table first.

MERGE is not idempotent over history: re-merging day D on top of days after D leaves
their changes in place. So before merging day D the table is brought back to exactly the
state day D-1 left, and the version each day's MERGE created is kept in the Delta table
`device_catalog_versions` (and in the materialization metadata).

Why the day -> version link cannot drift (`plan_day`):
- Each MERGE's commit metadata names its day and the state it was applied to (`base`:
  the version recorded for D-1, or "empty"). The commit and that fact are one atomic
  Delta commit, so "day D is merged onto D-1's state" is read from the table itself.
- Compaction (OPTIMIZE) and VACUUM commits change no rows: they are skipped when asking
  "what changed since D-1's version?", so they never make a day look moved past.
- A run that fails after its MERGE committed but before it recorded the version finds,
  on retry, its own MERGE as the newest row-changing commit since D-1's version with the
  same day and base: it records that version instead of merging twice.
- A day whose file is empty commits nothing: its recorded version is the table's version
  after any restore, whose content is D-1's state, which is exactly the state after D.
"""

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import dagster as dg
import pyarrow as pa
from pyspark.sql import SparkSession

from assets.catalog import RESTORE_WHOLE_TABLE, declared
from assets.materialization import commit_metadata, materialization_metadata
from assets.partition_range import SINGLE_RUN, materialize_partitions, parse_day
from assets.progress import Progress
from assets.run_policy import IN_ORDER
from assets.updates.change_files import CATALOG_COLUMNS, parse_catalog_changes
from resources import Lakehouse, LandingZone, SparkResource
from resources.lakehouse import (
    CommitResult,
    HistoryEntry,
    WhenMatchedUpdate,
    WhenNotMatchedInsert,
)
from resources.lakehouse.predicates import eq, from_source, matches

DEVICE_CATALOG = "device_catalog"
VERSIONS = "device_catalog_versions"
EMPTY = "empty"
# Operations that rewrite files without changing rows.
LAYOUT_ONLY = frozenset({"OPTIMIZE", "VACUUM START", "VACUUM END"})

CATALOG_SCHEMA = pa.schema([pa.field(name, pa.string()) for name in CATALOG_COLUMNS])
VERSIONS_SCHEMA = pa.schema(
    [
        pa.field("execution_day", pa.date32(), nullable=False),
        pa.field("delta_version", pa.int64(), nullable=False),
        pa.field("dagster_run_id", pa.string()),
        pa.field("recorded_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)
catalog_days = dg.DailyPartitionsDefinition(start_date="2024-01-01")


@dataclass(frozen=True)
class DayPlan:
    """What to do before recording day D's version."""

    action: Literal["start_empty", "restore", "merge", "already_merged"]
    base: str
    """The state day D applies to: D-1's recorded version, or "empty"."""
    version: int | None = None
    """restore: the version to restore; already_merged: the MERGE to record."""


def plan_day(day: str, base: str, commits_since_base: Sequence[HistoryEntry]) -> DayPlan:
    """Decide how to bring the table to D-1's state, or see that D is already merged.

    `commits_since_base` are the commits after D-1's version (all commits when D starts
    from empty), oldest first.
    """
    changes = [c for c in commits_since_base if c.operation.upper() not in LAYOUT_ONLY]
    if changes:
        newest = changes[-1].metadata
        if newest.get("partition_key") == day and newest.get("base") == base:
            if newest.get("step") == "merge":
                return DayPlan("already_merged", base, changes[-1].version)
            if newest.get("step") == "reset":
                # A previous attempt already brought the table back to `base`.
                return DayPlan("merge", base)
    if base == EMPTY:
        return DayPlan("start_empty", base)
    if changes:
        # The newest version whose rows are still D-1's: D-1's own version plus any
        # compaction committed before the first row change, which the restore keeps.
        return DayPlan("restore", base, changes[0].version - 1)
    return DayPlan("merge", base)


def recorded_version(lakehouse: Lakehouse, day: dt.date) -> int | None:
    if not lakehouse.exists(VERSIONS):
        return None
    rows = lakehouse.read_arrow(VERSIONS, where=eq("execution_day", day)).to_pylist()
    return rows[0]["delta_version"] if rows else None


def commits_after(lakehouse: Lakehouse, version: int | None) -> list[HistoryEntry]:
    """Commits after `version` (all when None), oldest first; reads only those."""
    if not lakehouse.exists(DEVICE_CATALOG):
        return []
    current = lakehouse.version(DEVICE_CATALOG)
    start = -1 if version is None else version
    if current is None or current <= start:
        return []
    newest_first = lakehouse.history(DEVICE_CATALOG, limit=current - start)
    return [c for c in reversed(newest_first) if c.version > start]


def record_version(
    lakehouse: Lakehouse, day: dt.date, version: int, metadata: Mapping[str, Any]
) -> None:
    row = pa.Table.from_pylist(
        [
            {
                "execution_day": day,
                "delta_version": version,
                "dagster_run_id": metadata.get("dagster_run_id"),
                "recorded_at": dt.datetime.now(dt.UTC),
            }
        ],
        schema=VERSIONS_SCHEMA,
    )
    if not lakehouse.exists(VERSIONS):
        lakehouse.append(VERSIONS, row, metadata=metadata)
        return
    lakehouse.merge(
        VERSIONS,
        row,
        on=matches("execution_day"),
        clauses=[WhenMatchedUpdate(), WhenNotMatchedInsert()],
        metadata=metadata,
    )


@dg.asset(
    partitions_def=catalog_days,
    backfill_policy=SINGLE_RUN,
    deps=[
        dg.AssetDep(
            "device_catalog",
            partition_mapping=dg.TimeWindowPartitionMapping(start_offset=-1, end_offset=-1),
        )
    ],
    group_name="updates",
    kinds={"spark", "delta"},
    **declared(
        "stateful-merger",
        restore=RESTORE_WHOLE_TABLE,
        reads=["device_catalog"],
        writes=["device_catalog_versions"],
    ),
)
def device_catalog(
    context: dg.AssetExecutionContext,
    spark: SparkResource,
    lakehouse: Lakehouse,
    landing: LandingZone,
) -> dg.MaterializeResult:
    """The device catalog (one row per `id`), merged day by day from
    `device_catalog/YYYY-MM-DD.jsonl`. Depends on its own previous day, so backfills run
    in order: a backfilled range is one run that merges its days oldest first, and
    stops at the first day that fails. Before merging a day whose successors were already
    merged, the table is restored to the previous day's state (versions in
    `device_catalog_versions`): once at the start of a range."""

    def materialize_day(partition_key: str) -> dict[str, Any]:
        return merge_day(context, lakehouse, parse_day(partition_key), spark.session(), landing)

    materialize_partitions(context, materialize_day, on_failure="stop")
    return dg.MaterializeResult()


def merge_day(
    context: dg.AssetExecutionContext,
    lakehouse: Lakehouse,
    day: dt.date,
    session: SparkSession,
    landing: LandingZone,
) -> dict[str, Any]:
    """Bring the catalog to day `day`'s state (see `plan_day`); its metadata.

    Not through the Transactional Writer: a day is applied on the version its
    predecessor left, so its record of being applied is that day-to-version link in
    `device_catalog_versions`, which `plan_day` reads (a merged day is not merged again,
    a day rerun after its successors first restores its predecessor's version)."""
    partition_key = day.isoformat()
    progress = Progress(context.log, f"{DEVICE_CATALOG} {partition_key}")
    with progress.phase("read") as read:
        changes = parse_catalog_changes(session, landing, day)
        read.update(files=1, **changes.facts())
    with progress.phase("plan") as planned:
        previous = recorded_version(lakehouse, day - dt.timedelta(days=1))
        base = EMPTY if previous is None else str(previous)
        commits = commits_after(lakehouse, previous)
        plan = plan_day(partition_key, base, commits)
        planned.update(action=plan.action, base_version=base)

    def meta(step: str) -> dict[str, Any]:
        return commit_metadata(
            context, partition_key=partition_key, sources=[changes.source], base=base, step=step
        )

    if plan.action == "already_merged":
        context.log.info(f"day {day} was already merged as version {plan.version}")
        [made] = [c for c in commits if c.version == plan.version]
        result = CommitResult(DEVICE_CATALOG, made.version, made.operation, made.metrics)
    else:
        if plan.action == "start_empty":
            lakehouse.overwrite(
                DEVICE_CATALOG, CATALOG_SCHEMA.empty_table(), metadata=meta("reset")
            )
        elif plan.action == "restore" and plan.version is not None:
            context.log.info(
                f"restoring {DEVICE_CATALOG} to version {plan.version}, the "
                f"state day {day - dt.timedelta(days=1)} left"
            )
            lakehouse.restore(DEVICE_CATALOG, plan.version, metadata=meta("reset"))
        with progress.phase("merge") as merged:
            result = lakehouse.merge(
                DEVICE_CATALOG,
                changes.frame,
                on=matches("id"),
                clauses=[
                    WhenMatchedUpdate(set=from_source(CATALOG_COLUMNS)),
                    WhenNotMatchedInsert(values=from_source(CATALOG_COLUMNS)),
                ],
                metadata=meta("merge"),
            )
            merged.update(
                delta_version=result.version,
                rows_inserted=result.metrics["rows_inserted"],
                rows_updated=result.metrics["rows_updated"],
            )
    record_version(lakehouse, day, result.version, meta("record"))
    return materialization_metadata(
        lakehouse,
        result,
        partition_key=partition_key,
        sources=[changes.source],
        extra={**changes.facts(), "plan": plan.action, "base_version": base},
    )


device_catalog_job = dg.define_asset_job(
    "device_catalog_job",
    selection=[device_catalog],
    description="Merge days of device_catalog in order (a range restores once, then merges "
    "each day; one run). One run at a time.",
    tags={IN_ORDER: "device_catalog"},
)
