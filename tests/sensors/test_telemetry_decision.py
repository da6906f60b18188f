"""The telemetry sensor's decision kept from tick to tick (sensors/telemetry_decision.py).

Every tick of the test deployment also checks that the kept decision asks for exactly the
runs a decision made from every file and whole control tables asks for
(`Deployment.tick`); these scenarios move each fact it rests on."""

from __future__ import annotations

import pytest
from telemetry_deployment import Deployment
from telemetry_history import expected_totals, history

from assets.telemetry import (
    TelemetrySettings,
    blacklist_telemetry_file,
    control,
    reingest_telemetry_file,
    release_quarantined_file,
)

FILES = history(["Tool01", "Tool02"], files_per_subject=4, rows_per_file=20)
META = {"dagster_run_id": "test", "asset_key": "telemetry_raw", "partition_key": None}


@pytest.fixture
def deployment(instance, lakehouse, landing) -> Deployment:
    return Deployment(instance, lakehouse, landing, TelemetrySettings())


def subjects_asked(requests) -> list[tuple[str, str]]:
    return sorted((r.partition_key, r.tags["telemetry/pending"]) for r in requests)


@pytest.mark.long_on_delta_spark
@pytest.mark.parametrize("feed", [True, False], ids=["with_feed", "tables_made_before_the_feed"])
def test_runs_and_operators_reach_the_kept_decision_across_a_restart(deployment, restart, feed):
    if not feed:
        for table in control.FOLLOWED:
            deployment.lakehouse.create(table, control.SCHEMAS[table], metadata=META)
    tool01 = [f for f in FILES if "Tool01" in f.path]
    tool02 = [f for f in FILES if "Tool02" in f.path]
    deployment.deliver(tool01[:3] + tool02)
    assert [r.partition_key for r in deployment.run_pending()] == ["Tool01", "Tool02"]
    assert deployment.run_pending() == []

    deployment.operate(blacklist_telemetry_file, tool02[1].path)
    assert subjects_asked(deployment.run_pending()) == [
        ("Tool02", f"{tool02[1].path} (blacklisted)")
    ]
    restart()  # a new code server: nothing kept
    assert deployment.run_pending() == []

    deployment.deliver([tool01[3]])
    deployment.operate(reingest_telemetry_file, tool01[0].path)
    assert subjects_asked(deployment.run_pending()) == [
        ("Tool01", f"{tool01[0].path} (reingest), {tool01[3].path} (new)")
    ]
    assert deployment.run_pending() == []
    kept = [f for f in FILES if f is not tool02[1]]
    assert deployment.totals() == expected_totals(kept)


@pytest.mark.long_on_delta_spark
def test_a_release_of_a_quarantined_file_is_followed(deployment):
    files = history(["Tool01"], files_per_subject=6, rows_per_file=40)
    deployment.settings = TelemetrySettings(lateness_horizon_hours=18)
    deployment.deliver(files[1:])
    deployment.run_pending()
    deployment.deliver([files[0]])  # its data ends ~20 h before the newest
    deployment.run_pending()
    assert deployment.run_pending() == []  # quarantined: held
    deployment.operate(release_quarantined_file, files[0].path)
    assert subjects_asked(deployment.run_pending()) == [("Tool01", f"{files[0].path} (released)")]
    assert deployment.totals() == expected_totals(files)
