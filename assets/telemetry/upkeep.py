"""Keeping the telemetry tables quick to read. Every run of a subject commits a few small
files to `telemetry_raw` and the derived and control tables, thousands an hour; an hourly
compaction bin-packs them into files of each table's target size."""

import dagster as dg

from assets.maintenance import compact_tables
from assets.telemetry import control

COMPACTED = [
    control.RAW,
    control.WITHIN_HOUR,
    control.HOUR_START,
    control.HOURLY,
    control.FILE_STATE,
    control.EVENTS,
]

compact_telemetry_tables = dg.ScheduleDefinition(
    name="compact_telemetry_tables",
    job=compact_tables,
    cron_schedule="17 * * * *",
    run_config={"ops": {"compact_delta_tables": {"config": {"tables": COMPACTED}}}},
    default_status=dg.DefaultScheduleStatus.RUNNING,
)
