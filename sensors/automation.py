"""The automation sensor: evaluates every asset's automation condition (assets/automation.py)
in the daemon and launches what they ask for. On by default, so `dagster dev` keeps the
derived assets up to date as soon as it starts; it ticks as often as the file sensors
(SENSOR_INTERVAL_SECONDS), so a derived asset follows its upstream's run within a tick.

A range of partitions asked for at once goes out as a backfill (Dagster's
`emit_backfills`), which the asset's single-run backfill policy builds in one run; a
single partition, or an unpartitioned asset, is one run launched at once.
"""

from __future__ import annotations

import dagster as dg

AUTOMATION_SENSOR = "lakehouse_automation"


def automation_sensor(interval_seconds: int) -> dg.AutomationConditionSensorDefinition:
    return dg.AutomationConditionSensorDefinition(
        AUTOMATION_SENSOR,
        target=dg.AssetSelection.all(),
        default_status=dg.DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=interval_seconds,
        description="Brings every asset with an automation condition up to date after "
        "its upstream changes (each asset's condition and evaluations: its Automation tab).",
    )
