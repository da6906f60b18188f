"""Data Overwrite: `visits_daily`, one Delta table partitioned by event date.

A day's materialization replaces exactly that day with replaceWhere, in one commit; a rerun
or a backfill of the day is therefore safe by construction, and other days are untouched.
"""

import dagster as dg

from assets.materialization import commit_metadata, materialization_metadata
from assets.overwriting.calendar import parse_day
from assets.overwriting.visits_source import parse_landed_visits
from resources import Lakehouse, LandingZone, SparkResource
from resources.lakehouse.predicates import eq

VISITS_DAILY = "visits_daily"
daily_partitions = dg.DailyPartitionsDefinition(start_date="2024-01-01")


@dg.asset(partitions_def=daily_partitions, group_name="overwriting", kinds={"spark", "delta"})
def visits_daily(
    context: dg.AssetExecutionContext,
    spark: SparkResource,
    lakehouse: Lakehouse,
    landing: LandingZone,
) -> dg.MaterializeResult:
    """Visits of one day (UTC), stored in the `visits_daily` Delta table partitioned by
    `event_date`. Materializing a day replaces that day only (replaceWhere); duplicate
    visit_ids are kept once. Reclaim replaced files with the `vacuum_table` job."""
    day = parse_day(context.partition_key)
    parsed = parse_landed_visits(spark.session(), landing, [day])
    result = lakehouse.overwrite(
        VISITS_DAILY,
        parsed.frame,
        where=eq("event_date", day),
        partition_by=["event_date"],
        metadata=commit_metadata(
            context, partition_key=context.partition_key, sources=parsed.sources
        ),
    )
    return dg.MaterializeResult(
        metadata=materialization_metadata(
            lakehouse,
            result,
            partition_key=context.partition_key,
            sources=parsed.sources,
            extra=parsed.facts(),
        )
    )
