"""The automation sensor: evaluates every asset's automation condition (assets/automation.py)
in the daemon and launches what they ask for. On by default, so `dagster dev` keeps the
derived assets up to date as soon as it starts; it ticks as often as the file sensors
(SENSOR_INTERVAL_SECONDS), so a derived asset is asked for within a tick of its
upstream's run.

A single partition, or an unpartitioned asset, is one run launched at once. Several
partitions asked for at once go out as a backfill (Dagster's `emit_backfills`), which the
asset's single-run backfill policy builds in one run. Dagster's backfill daemon launches
that run: it looks for new backfills every 30 s (fixed in Dagster 1.13), so such a run
starts up to 30 s after the tick that asked for it (in the demo, twice in the visits
part). One run per partition instead would start at once, but 42 days would be 42 run
processes instead of one.

Its runs leave the run queue after those of the file sensors (`BEHIND_IN_QUEUE`): they
refresh tables derived from what those runs commit.
"""

from __future__ import annotations

import dagster as dg

from assets.run_policy import BEHIND_IN_QUEUE

AUTOMATION_SENSOR = "lakehouse_automation"


def automation_sensor(interval_seconds: int) -> dg.AutomationConditionSensorDefinition:
    return dg.AutomationConditionSensorDefinition(
        AUTOMATION_SENSOR,
        target=dg.AssetSelection.all(),
        default_status=dg.DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=interval_seconds,
        run_tags=BEHIND_IN_QUEUE,
        description="Brings every asset with an automation condition up to date after "
        "its upstream changes (each asset's condition and evaluations: its Automation tab).",
    )
