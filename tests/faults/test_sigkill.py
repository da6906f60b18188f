"""SIGKILL real run processes at random moments on every write path: each table is
before or after, never partial, and the retry converges to the clean result, with no
duplicate.

A twin lakehouse runs the same trials cleanly, in this process, from the same landing
zone: it is the clean result. After a kill, each table's rows are those of the trial
before or those of the twin; then the run is retried, and every table's rows equal the
twin's. Kill points fall uniformly over the run after it booted, so they land before the
first commit, between commits (a multi-table path), and after the last.

Marked slow: every trial boots a run process (with its own JVM on the Spark paths)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from faults.paths import PATHS
from support import table_contents

from resources import Lakehouse

pytestmark = pytest.mark.slow  # on delta-rs, the default engine

TRIALS = {
    "visits": 30,
    "devices": 30,
    "device_catalog": 25,
    "telemetry": 70,  # no JVM to boot: the cheap trials
    "payments": 25,
    "events": 25,
}
WRITER = Path(__file__).with_name("writer.py")
REPORT = Path(__file__).resolve().parents[2] / ".data" / "fault-trials"

VOLATILE = {
    # Who wrote and when: another run, another moment, the same rows.
    "dagster_run_id",
    "registered_at",
    "recorded_at",
    "first_seen_at",
    "ingested_at",
    "last_seen",
    "next_attempt_at",
    # Versions of the table a row points into: a killed run's commits shift them.
    "delta_version",
    "raw_version",
}
LOGS = {"telemetry_ingest_events"}
"""Append-only logs of attempts: a killed attempt leaves its line, by design."""


def contents(lakehouse: Lakehouse) -> dict[str, str]:
    """A digest of every table's rows, without `VOLATILE` columns and `LOGS`."""
    return table_contents(lakehouse, without_columns=VOLATILE, without_tables=LOGS)


class Writer:
    """A run process of one write path, booted ahead (see `writer.py`)."""

    def __init__(self, path: str, lakehouse: Lakehouse, landing) -> None:
        command = [sys.executable, str(WRITER), "--path", path]
        command += ["--lakehouse", lakehouse.root, "--landing", landing.root]
        # Its own process group: the kill takes the run's JVM down with it.
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

    def run(self, partition: str) -> float:
        """Tell the booted process to materialize `partition`; returns when it started."""
        assert self.process.stdout is not None and self.process.stdin is not None
        for line in self.process.stdout:
            if line.strip() == "ready":
                self.process.stdin.write(f"{partition}\n")
                self.process.stdin.flush()
                return time.monotonic()
        self.process.wait()
        raise AssertionError("the writer died before it was ready")

    def kill(self) -> bool:
        """SIGKILL the run (and its JVM); False when it had already finished."""
        if self.process.poll() is not None:
            return False
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        return True

    def finish(self, started: float) -> float:
        """Let the run finish; its duration."""
        output = self.process.communicate(timeout=600)[0]
        assert self.process.returncode == 0, output[-3000:]
        return time.monotonic() - started


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("name", sorted(TRIALS))
def test_killed_runs_leave_whole_tables_and_retries_converge(
    tmp_path, spark, landing, instance, name
):
    path = PATHS[name]
    rng = random.Random(name)
    lakehouse = Lakehouse(root=str(tmp_path / "lakehouse"), spark=spark)
    twin = Lakehouse(root=str(tmp_path / "twin"), spark=spark)
    real_resources = path.resources(spark, lakehouse, landing)
    twin_resources = path.resources(spark, twin, landing)

    partition = path.land(landing, 0)
    writer = Writer(name, lakehouse, landing)
    duration = writer.finish(writer.run(partition))
    path.materialize(twin_resources, partition, instance)
    assert contents(lakehouse) == contents(twin)

    spread: Counter = Counter()
    clean_states = {table: {digest} for table, digest in contents(twin).items()}
    writer = Writer(name, lakehouse, landing)
    for trial in range(1, TRIALS[name] + 1):
        before = contents(lakehouse)
        partition = path.land(landing, trial)
        path.materialize(twin_resources, partition, instance)
        after = contents(twin)
        for table, digest in after.items():
            clean_states.setdefault(table, set()).add(digest)
        writer.run(partition)
        time.sleep(rng.uniform(0, duration * 1.1))
        killed_mid_run = writer.kill()
        writer = Writer(name, lakehouse, landing)  # boots while this trial is checked

        # Whole commits only: every table holds a state some clean run produced (for
        # device_catalog's corrected days, the restored state of the day before too).
        killed = contents(lakehouse)
        for table, digest in killed.items():
            assert digest in clean_states[table], f"trial {trial}: {table} is partial"
        if not killed_mid_run or killed == after:
            spread["after the last commit"] += 1
        elif killed == before:
            spread["before the first commit"] += 1
        else:
            spread["between commits"] += 1

        # The retry: a new run process every 5th trial (its time keeps the kill points
        # in step with the machine's pace), else a run in this process.
        if trial % 5 == 0:
            duration = writer.finish(writer.run(partition))
            writer = Writer(name, lakehouse, landing)
        else:
            path.materialize(real_resources, partition, instance)
        assert contents(lakehouse) == after, f"trial {trial}: the retry did not converge"
    writer.kill()

    REPORT.mkdir(parents=True, exist_ok=True)
    (REPORT / f"{name}.json").write_text(json.dumps({"trials": TRIALS[name], **spread}) + "\n")
    print(f"{name}: {TRIALS[name]} trials, kill points {dict(spread)}")
    assert spread["before the first commit"] > 0 and spread["after the last commit"] > 0, spread


def test_two_hundred_trials_in_all():
    assert sum(TRIALS.values()) >= 200
