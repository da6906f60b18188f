"""The hourly compaction of the telemetry tables: fewer files, the same rows, and the
pipeline carries on exactly as before (compaction is not work for the sensor)."""

from __future__ import annotations

import dagster as dg
import pytest
from telemetry_history import expected_hourly, expected_totals, history

from assets.maintenance import compact_tables
from assets.telemetry import control
from assets.telemetry.upkeep import compact_telemetry_tables

FILES = history(["Tool01", "Tool02"], files_per_subject=12, rows_per_file=30)
LATE = [FILES[4], FILES[9]]


def compact(deployment) -> dict:
    """The scheduled run, with the schedule's own run config; its output's metadata."""
    with dg.build_schedule_context(instance=deployment.instance) as context:
        request = compact_telemetry_tables.evaluate_tick(context).run_requests[0]
    result = compact_tables.execute_in_process(
        run_config=request.run_config,
        resources={"lakehouse": deployment.lakehouse},
        instance=deployment.instance,
    )
    (output,) = [e for e in result.all_node_events if e.event_type_value == "STEP_OUTPUT"]
    return output.event_specific_data.metadata["compacted"].value


@pytest.mark.long_on_delta_spark
def test_compaction_bin_packs_small_files_and_changes_no_row(deployment):
    on_time = [f for f in FILES if f not in LATE]
    waves = [on_time[i::3] for i in range(3)]
    for wave in waves:
        deployment.deliver(wave)
        assert len(deployment.run_pending()) == 2
    raw, totals = deployment.raw(), deployment.totals()
    raw_version = deployment.lakehouse.version(control.RAW)
    commits = deployment.lakehouse.history(control.RAW)
    live = sum(c.metrics.get("files_added", 0) - c.metrics.get("files_removed", 0) for c in commits)
    assert live >= len(waves) * 2  # at least a small file per run of a subject

    compacted = compact(deployment)

    # Every small file the runs wrote (3 waves of 2 subjects) becomes one file.
    assert (compacted[control.RAW]["files_removed"], compacted[control.RAW]["files_added"]) == (
        live,
        1,
    )
    assert compacted[control.RAW]["delta_version"] == raw_version + 1
    assert (deployment.raw(), deployment.totals()) == (raw, totals)
    assert deployment.run_pending() == []  # a compaction is no pending work

    deployment.deliver(LATE)
    assert len(deployment.run_pending()) == 2
    assert deployment.totals() == expected_totals(FILES)
    assert deployment.hourly() == expected_hourly(FILES)
