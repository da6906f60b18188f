"""Two run processes for one subject at once: what happens when a run slips past the
instance's one-run-per-subject limit (a bare `dagster asset materialize`, a second
deployment). Delta's optimistic concurrency refuses the stale writer's commits, its step
is redone from what the winner left, and nothing is applied twice."""

from __future__ import annotations

import datetime as dt
import random
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from support import instance_home, run_process_env
from telemetry_history import START, expected_hourly, expected_totals, report

PROJECT_ROOT = Path(__file__).resolve().parents[3]
ASSETS = "telemetry_raw,telemetry_running_totals,telemetry_hourly"


@pytest.mark.run_processes
def test_two_concurrent_runs_of_a_subject_apply_every_file_once(tmp_path, deployment):
    rng = random.Random(21)
    files = [report("Tool01", START + dt.timedelta(hours=4 * i), 300, rng) for i in range(40)]
    rng.shuffle(files)
    deployment.deliver(files)
    home = instance_home(tmp_path / "dagster")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions("subjects", ["Tool01"])
    env = run_process_env(home, deployment.lakehouse, deployment.landing)
    command = [sys.executable, "-m", "dagster", "asset", "materialize"]
    command += ["-f", "platform/definitions.py", "--select", ASSETS, "--partition", "Tool01"]
    runs = [
        subprocess.Popen(
            command, cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=300)[0].decode() for run in runs]
    for run, output in zip(runs, outputs, strict=True):
        assert run.returncode == 0, output[-3000:]

    states = deployment.states()
    assert {s.status for s in states.values()} == {"ingested"}
    assert sorted(s.process_count for s in states.values()) == [1] * len(files)
    assert len(deployment.raw()) == 40 * 300
    assert deployment.totals() == expected_totals(files)
    assert deployment.hourly() == expected_hourly(files)
    assert deployment.run_pending() == []  # nothing left for the sensor either
