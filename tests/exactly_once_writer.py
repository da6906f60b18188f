"""A writer process for the Transactional Writer's kill trials (run as a script by the
tests), and the trials themselves.

The writer writes one week of rows, one Delta partition per day, through
`write_exactly_once` (the function every transactional asset calls): app id
`kill_trial/<week>`, its input is the trial number. The trials SIGKILL it (with its JVM,
for delta-spark) at a random point of its write, while a reader follows the table, then
run it again and replay it."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from assets.transactional_writer import input_digest, write_exactly_once  # noqa: E402
from resources import Lakehouse, SparkResource  # noqa: E402
from resources.lakehouse.predicates import between  # noqa: E402

TABLE = "kill_trial"
WEEK = [dt.date(2024, 1, 1) + dt.timedelta(days=d) for d in range(7)]
ROWS_PER_DAY = 500


def week_rows(trial: int) -> pa.Table:
    days = [day for day in WEEK for _ in range(ROWS_PER_DAY)]
    return pa.table(
        {
            "day": pa.array(days, pa.date32()),
            "id": pa.array(range(len(days)), pa.int64()),
            "trial": pa.array([trial] * len(days), pa.int64()),
        }
    )


def write_week(lake: Lakehouse, trial: int) -> str:
    """Write trial `trial`'s week exactly once; returns what happened."""
    outcome = write_exactly_once(
        lake,
        table=TABLE,
        asset_key=TABLE,
        partition_key=WEEK[0].isoformat(),
        digest=input_digest({"trial": trial}),
        run_id=f"trial-{trial}",
        write=lambda app_transaction, facts: lake.overwrite(
            TABLE,
            week_rows(trial),
            where=between("day", WEEK[0], WEEK[-1]),
            partition_by=["day"],
            metadata={"trial": trial, **facts},
            app_transaction=app_transaction,
        ),
        create_empty=lambda: lake.append(
            TABLE, week_rows(trial).schema.empty_table(), partition_by=["day"], metadata={}
        ),
    )
    if outcome.result is None:
        return f"skipped: {outcome.skipped}"
    return f"committed version {outcome.result.version}"


@dataclass
class Reader:
    """Reads the table over and over from another thread; every snapshot it sees must
    be one whole trial's week (or no table yet)."""

    lake: Lakehouse
    seen: Counter = field(default_factory=Counter)
    torn: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self._stop.is_set():
            if not self.lake.exists(TABLE):
                time.sleep(0.01)
                continue
            rows = self.lake.read_arrow(TABLE, columns=["trial"]).column("trial").to_pylist()
            time.sleep(0.005)  # leave the writer its core
            trials = Counter(rows)
            if rows and (len(trials) != 1 or len(rows) != len(WEEK) * ROWS_PER_DAY):
                self.torn.append(f"{len(rows)} rows of trials {dict(trials)}")
            self.seen.update(trials.keys())

    def __enter__(self) -> Reader:
        self._thread = threading.Thread(target=self.run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=120)


@dataclass
class TrialReport:
    killed_before_commit: int = 0
    killed_after_commit: int = 0
    replays_skipped: int = 0


def _start(lake: Lakehouse, engine: str, jars: str, trial: int) -> subprocess.Popen:
    command = [sys.executable, __file__, "--root", lake.root, "--engine", engine]
    command += ["--jars", jars, "--trial", str(trial)]
    # Its own process group: the kill takes the writer's JVM down with it.
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.strip() == "ready":
            return process
    process.wait()
    raise AssertionError(f"writer of trial {trial} died before it was ready")


def _finish(process: subprocess.Popen) -> str:
    # Through the text stream `_start` read "ready" from: `communicate(timeout=...)` reads
    # the pipe underneath and would miss a line already buffered there (a quick replay
    # prints its outcome right after "ready").
    assert process.stdout is not None
    output = process.stdout.read()
    process.wait(timeout=600)
    assert process.returncode == 0, output
    return output.strip().splitlines()[-1]


@dataclass
class Timing:
    """When a clean write commits and when its process ends, in seconds after it is
    ready: measured under the trials' own load (the reader running), and measured again
    on every clean rerun, so kill points follow the machine's pace."""

    commit: float
    end: float

    @classmethod
    def of_clean_run(cls, lake: Lakehouse, process: subprocess.Popen) -> tuple[Timing, str]:
        began, before = time.monotonic(), lake.version(TABLE)
        commit = None
        while process.poll() is None:
            if commit is None and lake.version(TABLE) != before:
                commit = time.monotonic() - began
            time.sleep(0.02)
        end = time.monotonic() - began
        return cls(commit if commit is not None else end, end), _finish(process)

    def kill_point(self, rng: random.Random, trial: int) -> float:
        """Alternately before and after the commit, uniformly within each side."""
        if trial % 2:
            return rng.uniform(0, self.commit)
        return rng.uniform(self.commit, max(self.end, self.commit))


def kill_trials(
    lake: Lakehouse, *, engine: str, jars: str, trials: int, replay_every: int = 1, seed: int = 7
) -> TrialReport:
    """Run `trials` kill trials; asserts what must hold after each, returns what was hit."""
    rng = random.Random(seed)
    report = TrialReport()
    with Reader(lake) as reader:
        timing, outcome = Timing.of_clean_run(lake, _start(lake, engine, jars, 0))
        assert outcome.startswith("committed"), outcome
        for trial in range(1, trials + 1):
            before = lake.version(TABLE)
            process = _start(lake, engine, jars, trial)
            time.sleep(timing.kill_point(rng, trial))
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            # Trial t is the week's input number t + 1 (the calibration run was the first).
            input_version = trial + 1
            committed = lake.app_transaction_version(TABLE, f"{TABLE}/{WEEK[0]}")
            rerun = _start(lake, engine, jars, trial)
            if committed == input_version:
                report.killed_after_commit += 1
                outcome = _finish(rerun)
                assert outcome == f"skipped: already committed at version {input_version}", outcome
            else:
                report.killed_before_commit += 1
                timing, outcome = Timing.of_clean_run(lake, rerun)
                assert outcome.startswith("committed"), outcome
            rows = lake.read_arrow(TABLE).to_pylist()
            assert len(rows) == len(WEEK) * ROWS_PER_DAY, f"trial {trial}: {len(rows)} rows"
            assert {r["trial"] for r in rows} == {trial}
            assert len({(r["day"], r["id"]) for r in rows}) == len(rows)
            assert lake.version(TABLE) == (before or 0) + 1
            if trial % replay_every == 0:
                version = lake.version(TABLE)
                assert _finish(_start(lake, engine, jars, trial)).startswith("skipped")
                assert lake.version(TABLE) == version
                report.replays_skipped += 1
    assert reader.torn == [], reader.torn[:5]
    assert reader.seen, "the reader never saw the table"
    return report


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--engine", required=True)
    parser.add_argument("--jars", default="")
    parser.add_argument("--trial", type=int, required=True)
    args = parser.parse_args()
    spark = SparkResource(master="local[1]", shuffle_partitions=1, delta_jars=args.jars)
    lake = Lakehouse(root=args.root, engine=args.engine, spark=spark)
    if args.engine == "delta-spark":
        spark.session()
    print("ready", flush=True)
    print(write_week(lake, args.trial), flush=True)


if __name__ == "__main__":
    main()
