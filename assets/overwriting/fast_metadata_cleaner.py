"""Fast Metadata Cleaner: `visits_weekly`, one Delta table per week, built from
`visits_daily`.

Re-processing a week replaces that week's table in one overwrite commit: the old files
are dropped from the table's metadata, never deleted row by row, so the cost depends on
the week's size alone, never on how much history exists. The week's visits are the
week's days of `visits_daily`, read at one version: the files are parsed and checked in
one place, and declarative automation rebuilds a week after any of its days changes.
"""

import datetime as dt
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import dagster as dg
from pydantic import Field
from pyspark.sql import functions as F

from assets.automation import after_upstream
from assets.catalog import RESTORE_OWN_TABLE, declared
from assets.materialization import commit_metadata, materialization_metadata
from assets.overwriting.calendar import days_of_week
from assets.overwriting.data_overwrite import VISITS_DAILY, visits_daily
from assets.overwriting.exposition import (
    ManifestEntry,
    active_tables,
    expose_visits,
    exposed_table_count,
    manifest_entries,
    upsert_manifest,
    weekly_table,
)
from assets.overwriting.visits_source import VISIT_COLUMNS
from assets.partition_range import SINGLE_RUN, materialize_partitions, parse_day, run_span
from assets.progress import Progress
from resources import Lakehouse
from resources.lakehouse import CommitResult
from resources.lakehouse.predicates import between, eq

if TYPE_CHECKING:
    from resources.lakehouse.port import Data

weekly_partitions = dg.WeeklyPartitionsDefinition(start_date="2024-01-01", day_offset=1)
TABLE_COUNT_CHECK = "table_count_below_limit"


class VisitsWeeklyConfig(dg.Config):
    table_limit: int = Field(
        default=100,
        description="How many tables the exposition may hold before readers suffer; freeze "
        "before it.",
    )
    warn_ratio: float = Field(
        default=0.8, description="The table-count check warns from this fraction of table_limit."
    )


def replace_week(
    lakehouse: Lakehouse, monday: dt.date, visits: "Data", *, metadata: Mapping[str, Any]
) -> CommitResult:
    """Make `visits` the whole content of week `monday`, wherever the week lives.

    Not through the Transactional Writer: the week is replaced whole from all its files
    in one commit, so a retry or a rerun writes the same week again and nothing can be
    applied twice."""
    own_table = weekly_table(monday)
    registered = active_tables(manifest_entries(lakehouse)).get(monday)
    holder = registered or own_table
    if registered in (None, own_table):
        result = lakehouse.overwrite(own_table, visits, metadata=metadata)
        if registered is None:
            # Exposed only once its table holds the week: readers never see a gap.
            upsert_manifest(
                lakehouse,
                [ManifestEntry(monday, own_table, "active", dt.datetime.now(dt.UTC))],
                metadata=metadata,
            )
        # Freezing may have folded this week into a yearly table while we wrote; it checks
        # for our commit after its swap, and we check for its swap after our commit, so one
        # of us always carries the newest rows over.
        holder = active_tables(manifest_entries(lakehouse)).get(monday, own_table)
        if holder == own_table:
            return result
    return lakehouse.overwrite(
        holder,
        visits,
        where=eq("week_start", monday),
        partition_by=["week_start"],
        metadata=metadata,
    )


def days_missing(first: dt.date, last: dt.date) -> dg.Failure:
    """A week is never built from nothing: none of its days is in visits_daily."""
    span = first.isoformat() if first == last else f"{first} .. {last}"
    sunday = days_of_week(last)[-1]
    return dg.Failure(
        f"visits_weekly {span}: {VISITS_DAILY} holds no day of {first} .. {sunday}; "
        f"materialize those days of {VISITS_DAILY} first"
    )


@dg.asset(
    partitions_def=weekly_partitions,
    # A week reads its seven days (Dagster maps a weekly partition to its days).
    deps=[visits_daily],
    # A week is built once any day of it is there: a day without visits is never built.
    automation_condition=after_upstream(every_upstream_partition=False),
    backfill_policy=SINGLE_RUN,
    check_specs=[
        dg.AssetCheckSpec(
            TABLE_COUNT_CHECK,
            asset="visits_weekly",
            description="The exposition holds fewer tables than table_limit x warn_ratio; "
            "warns before readers suffer: run freeze_visits_weeks to fold old weeks.",
        )
    ],
    group_name="overwriting",
    kinds={"spark", "delta"},
    **declared(
        "fast-metadata-cleaner",
        restore=RESTORE_OWN_TABLE,
        writes=["visits_manifest"],
    ),
)
def visits_weekly(
    context: dg.AssetExecutionContext, config: VisitsWeeklyConfig, lakehouse: Lakehouse
) -> dg.MaterializeResult:
    """Visits of one week (Monday to Sunday, UTC), one Delta table per week: the week's
    days of `visits_daily`, which declarative automation rebuilds after any of them
    changes.

    Materializing a week replaces its table in a single commit (Fast Metadata Cleaner);
    a backfilled range is one run and one read of `visits_daily`, then one commit per
    week. Read all weeks through the `visits_manifest` exposition. The check warns when
    the number of tables nears `table_limit`: run the `freeze_visits_weeks` job to fold
    old weeks into yearly tables.
    """
    keys = context.partition_keys
    mondays = [parse_day(key) for key in keys]
    progress = Progress(context.log, f"visits_weekly {run_span(keys)}")
    with progress.phase("read") as read:
        daily_version = lakehouse.version(VISITS_DAILY)
        if daily_version is None:
            raise days_missing(mondays[0], mondays[-1])
        # The range's days in one read at one version, split by week.
        visits = lakehouse.read(
            VISITS_DAILY,
            version=daily_version,
            where=between("event_date", mondays[0], days_of_week(mondays[-1])[-1]),
            columns=VISIT_COLUMNS,
        )
        weeks = lakehouse.staged_parts(
            visits.withColumn("week_start", F.to_date(F.date_trunc("week", "event_date"))),
            "week_start",
            order=["event_time", "visit_id"],
        )
        read.update(rows=weeks.total, visits_daily_version=daily_version)

    def materialize_week(partition_key: str) -> dict[str, Any]:
        monday = parse_day(partition_key)
        rows, count = weeks.part(monday)
        if count == 0:
            raise days_missing(monday, monday)
        metadata = commit_metadata(
            context, partition_key=partition_key, visits_daily_version=daily_version
        )
        result = replace_week(lakehouse, monday, rows, metadata=metadata)
        return materialization_metadata(
            lakehouse,
            result,
            partition_key=partition_key,
            extra={"visits_daily_version": daily_version},
        )

    with progress.phase("write"):
        materialize_partitions(context, materialize_week, on_failure="continue")
    expose_visits(lakehouse)
    tables = exposed_table_count(lakehouse)
    warn_at = int(config.table_limit * config.warn_ratio)
    return dg.MaterializeResult(
        check_results=[
            dg.AssetCheckResult(
                check_name=TABLE_COUNT_CHECK,
                passed=tables < warn_at,
                severity=dg.AssetCheckSeverity.WARN,
                metadata={"tables": tables, "table_limit": config.table_limit, "warn_at": warn_at},
                description=None
                if tables < warn_at
                else f"{tables} tables exposed, limit {config.table_limit}: freeze old weeks",
            )
        ],
    )
