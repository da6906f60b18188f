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

from assets.materialization import commit_metadata, partition_slice
from assets.overwriting.calendar import parse_day
from assets.overwriting.visit_first_seen import record_first_seen
from assets.overwriting.visits_source import parse_landed_visits
from assets.partition_range import SINGLE_RUN, materialize_partitions
from assets.progress import Progress
from assets.transactional_writer import transactional_metadata, write_partition_once
from resources import Lakehouse, LandingZone, SparkResource
from resources.lakehouse import AppTransaction, CommitResult
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
)
def visits_daily(
    context: dg.AssetExecutionContext,
    spark: SparkResource,
    lakehouse: Lakehouse,
    landing: LandingZone,
) -> dg.MaterializeResult:
    """Visits of one day (UTC), stored in the `visits_daily` Delta table partitioned by
    `event_date`. Materializing a day replaces that day only (replaceWhere); duplicate
    visit_ids are kept once. A backfilled range is one run, one commit per day. Reclaim
    replaced files with the `vacuum_table` job."""

    def materialize_day(partition_key: str) -> dict[str, Any]:
        day = parse_day(partition_key)
        progress = Progress(context.log, f"{VISITS_DAILY} {partition_key}")
        with progress.phase("read") as read:
            parsed = parse_landed_visits(spark.session(), landing, [day])
            read.update(files=len(parsed.sources), **parsed.facts())
        metadata = commit_metadata(context, partition_key=partition_key, sources=parsed.sources)

        def write(app_transaction: AppTransaction, facts: Mapping[str, Any]) -> CommitResult:
            # When each visit was first seen, before the day itself: a crash in between
            # is repaired by the retry, which records nothing twice.
            record_first_seen(
                lakehouse,
                parsed.frame,
                day,
                seen_at=dt.datetime.now(dt.UTC),
                run_id=context.run_id,
                metadata=metadata,
            )
            return lakehouse.overwrite(
                VISITS_DAILY,
                parsed.frame,
                where=eq("event_date", day),
                partition_by=["event_date"],
                metadata={**metadata, **facts},
                app_transaction=app_transaction,
            )

        with progress.phase("write") as written:
            outcome = write_partition_once(
                context,
                lakehouse,
                partition_key=partition_key,
                table=VISITS_DAILY,
                sources=parsed.sources,
                write=write,
                create_empty=lambda: lakehouse.append(
                    VISITS_DAILY,
                    parsed.frame.limit(0),
                    partition_by=["event_date"],
                    metadata=metadata,
                ),
            )
            written.update(outcome.progress())
        with progress.phase("metadata"):
            return transactional_metadata(
                lakehouse,
                outcome,
                table=VISITS_DAILY,
                partition_key=partition_key,
                sources=parsed.sources,
                extra={**parsed.facts(), **partition_slice("event_date", day)},
            )

    materialize_partitions(context, materialize_day, on_failure="continue")
    return dg.MaterializeResult()
