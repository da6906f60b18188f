"""Kill a materialization at random moments (SIGKILL, no cleanup): readers only ever see
the old content or the new one, and the retry gives exactly the clean result.

Marked slow: every trial boots a run process with its own Spark."""

from __future__ import annotations

import datetime as dt
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
from support import day_of_visits, run_process_env

from assets.overwriting import visits_daily
from assets.overwriting.data_overwrite import VISITS_DAILY

PROJECT_ROOT = Path(__file__).resolve().parents[3]
DAY = dt.date(2024, 6, 3)
TRIALS = 6

pytestmark = pytest.mark.slow


def content(lakehouse) -> list[tuple]:
    return sorted(
        (r["visit_id"], r["source_file"], r["source_line"])
        for r in lakehouse.read_arrow(VISITS_DAILY).to_pylist()
    )


def test_killed_runs_never_leave_a_partial_day(
    tmp_path, resources, lakehouse, landing, write_visits
):
    rng = random.Random(2024)
    write_visits(DAY, "part-0.jsonl", day_of_visits(DAY, 20_000))
    dg.materialize([visits_daily], partition_key=DAY.isoformat(), resources=resources)
    home = tmp_path / "dagster_home"
    home.mkdir()
    with dg.DagsterInstance.from_config(str(home)):
        pass
    env = run_process_env(home, lakehouse, landing)
    killed_mid_run = 0
    for trial in range(1, TRIALS + 1):
        before = content(lakehouse)
        new_visits = day_of_visits(DAY, 5_000, prefix=f"t{trial}-")
        write_visits(DAY, f"part-{trial}.jsonl", new_visits)
        run = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dagster",
                "asset",
                "materialize",
                "-f",
                str(PROJECT_ROOT / "platform" / "definitions.py"),
                "--select",
                "visits_daily",
                "--partition",
                DAY.isoformat(),
            ],
            env=env,
            cwd=PROJECT_ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        time.sleep(rng.uniform(4.0, 14.0))
        if run.poll() is None:
            killed_mid_run += 1
            os.killpg(run.pid, signal.SIGKILL)
        run.wait()

        new_rows = [
            (v["visit_id"], f"visits/date={DAY}/part-{trial}.jsonl", line)
            for line, v in enumerate(new_visits, start=1)
        ]
        expected = sorted(before + new_rows)
        # Whatever the moment of the kill: the old day or the new day, never a mix.
        assert content(lakehouse) in (before, expected)
        dg.materialize([visits_daily], partition_key=DAY.isoformat(), resources=resources)
        assert content(lakehouse) == expected
    assert killed_mid_run > 0, "no trial killed a run before it finished: widen the window"
