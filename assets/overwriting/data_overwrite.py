"""Data Overwrite: `visits_daily`, one Delta table partitioned by event date.

A day's materialization replaces exactly that day with replaceWhere, in one commit; a rerun
or a backfill of the day is therefore safe by construction, and other days are untouched.
The write is a Transactional Writer's (assets/transactional_writer.py): a day
whose files are already committed is skipped without a commit.
"""

import datetime as dt
from collections.abc import Mapping
from typing import Any

import dagster as dg

from assets.catalog import RESTORE_SLICE, declared
from assets.materialization import commit_metadata, partition_slice
from assets.overwriting.visit_first_seen import record_first_seen
from assets.overwriting.visits_source import VisitDay, parse_visit_days
from assets.partition_range import SINGLE_RUN, materialize_partitions, parse_day, run_span
from assets.progress import Progress
from assets.source_files import SourceDataError
from assets.transactional_writer import (
    register_partitions,
    transactional_metadata,
    write_partition_once,
)
from resources import Lakehouse, LandingZone, SparkResource
from resources.lakehouse import AppTransaction, CommitResult
from resources.lakehouse.frames import arrow_schema
from resources.lakehouse.predicates import eq

VISITS_DAILY = "visits_daily"
daily_partitions = dg.DailyPartitionsDefinition(start_date="2024-01-01")


@dg.asset(
    partitions_def=daily_partitions,
    backfill_policy=SINGLE_RUN,
    group_name="overwriting",
    kinds={"spark", "delta"},
    # Part of each partition's input identity: bump it when the code changes what it
    # writes, and every partition's next run writes again instead of being skipped.
    code_version="1",
    **declared(
        "data-overwrite",
        restore=RESTORE_SLICE,
        reads=["visits"],
        writes=["visit_first_seen", "input_versions"],
    ),
)
def visits_daily(
    context: dg.AssetExecutionContext,
    spark: SparkResource,
    lakehouse: Lakehouse,
    landing: LandingZone,
) -> dg.MaterializeResult:
    """Visits of one day (UTC), stored in the `visits_daily` Delta table partitioned by
    `event_date`. Materializing a day replaces that day only (replaceWhere); duplicate
    visit_ids are kept once. A backfilled range is one run and one Spark pass over all its
    files, then one commit per day. Reclaim replaced files with the `vacuum_table` job."""
    keys = context.partition_keys
    days = [parse_day(key) for key in keys]
    progress = Progress(context.log, f"{VISITS_DAILY} {run_span(keys)}")
    with progress.phase("read") as read:
        parsed = parse_visit_days(spark.session(), landing, lakehouse, days)
        read_by_day = {
            day: outcome for day, outcome in parsed.days.items() if isinstance(outcome, VisitDay)
        }
        days_read, read_days = list(read_by_day), list(read_by_day.values())
        read.update(
            days=len(days_read),
            refused=len(days) - len(days_read),
            files=sum(len(day.sources) for day in read_days),
            lines_read=sum(day.lines_read for day in read_days),
            duplicates_dropped=sum(day.duplicates_dropped for day in read_days),
        )
    if parsed.rows is not None:
        # When each visit was first seen, before the days themselves: a crash in between
        # is repaired by the retry, which records nothing twice.
        with progress.phase("first seen"):
            record_first_seen(
                lakehouse,
                parsed.rows,
                days_read,
                seen_at=dt.datetime.now(dt.UTC),
                run_id=context.run.run_id,
                metadata=commit_metadata(context, partition_key=run_span(keys)),
            )

    def create_empty() -> None:
        lakehouse.create(
            VISITS_DAILY,
            arrow_schema(read_days[0].rows),
            partition_by=["event_date"],
            metadata=commit_metadata(context, partition_key=None),  # no day's rows
        )

    # The days' inputs in one commit of the control table, before the first day's write.
    registered = register_partitions(
        context,
        lakehouse,
        table=VISITS_DAILY,
        sources={
            key: visits.sources
            for key in keys
            if isinstance(visits := parsed.days[parse_day(key)], VisitDay)
        },
        create_empty=create_empty,
    )

    def materialize_day(partition_key: str) -> dict[str, Any]:
        day = parse_day(partition_key)
        visits = parsed.days[day]
        if isinstance(visits, SourceDataError):
            raise visits
        metadata = commit_metadata(context, partition_key=partition_key, sources=visits.sources)

        def write(app_transaction: AppTransaction, facts: Mapping[str, Any]) -> CommitResult:
            return lakehouse.overwrite(
                VISITS_DAILY,
                visits.rows,
                where=eq("event_date", day),
                partition_by=["event_date"],
                metadata={**metadata, **facts},
                app_transaction=app_transaction,
            )

        outcome = write_partition_once(
            context,
            lakehouse,
            partition_key=partition_key,
            table=VISITS_DAILY,
            sources=visits.sources,
            write=write,
            create_empty=create_empty,
            registered=registered,
        )
        return transactional_metadata(
            lakehouse,
            outcome,
            table=VISITS_DAILY,
            partition_key=partition_key,
            sources=visits.sources,
            extra={**visits.facts(), **partition_slice("event_date", day)},
        )

    with progress.phase("write"):
        materialize_partitions(context, materialize_day, on_failure="continue")
    return dg.MaterializeResult()


visits_daily_job = dg.define_asset_job(
    "visits_daily_job",
    selection=[visits_daily],
    description="Materialize days of visits_daily (a range is one run, one commit per day).",
)
