"""The chaos soak: the platform under load while its processes die, then the time until
every table equals what plain Python computes from the files that landed.

    .venv/bin/python benchmarks/soak.py [--seed 1] [--minutes 5] [--converge-minutes 10]
    make soak SEED=1

1. The platform as a deployment runs it, on its own instance and folders under
   `.data/soak/seed-<seed>/`: the long-lived Spark, then a code server, the webserver and
   the daemon, each a process the supervisor starts again when it exits
   (demo/processes.py), every sensor ticking every 3 s as under `make demo`. The
   lakehouse is a small file system of its own (a 2 GiB tmpfs) where this machine lets
   the soak mount one, so its disk can be filled.
2. For `--minutes`, files of three sources land every few seconds (benchmarks/
   soak_load.py), and faults are injected at random moments (benchmarks/soak_faults.py):
   12 kills of run processes, 4 of the long-lived Spark, one of the code server (and
   then of a run process it left behind, when one is going), the daemon and the
   webserver, and the disk filled for 20 s. The seed decides the files,
   the moments and the order; which run a kill hits depends on what is running then.
3. Then the faults and files stop, and the soak measures the time until visits_daily,
   the weekly exposition of visits, the telemetry running totals and hourly rollups and
   user_events each hold exactly the rows computed here from the files (nothing lost,
   nothing doubled), waits for the run queue to drain, and compares again.

Nobody touches anything meanwhile: whatever heals, heals through the platform (run
retries, `dead_runs`, the sensors asking again for failed work, the managed Spark).
It prints the faults of each kind, the files landed, the runs launched, failed and
retried, each landed file's time until its partition was committed (also for the files
landed after the first minute, once a fresh deployment's first runs are behind) and where
that time went (the sensors' ticks, the run queue, the run processes' start, the runs), and the
time to converge; exits 1 when a bound is missed.

With `--stack`, the load alone (no fault) lands on a production profile that is up and
fresh (`make stack`, nothing landed yet), whose variables the shell holds: the files go
to its bucket through the landing zone's file system, its daemon launches the runs on its
cluster, and the sensors tick at the interval the stack was started with:

    SENSOR_INTERVAL_SECONDS=30 make stack                # in one shell
    set -a && source .data/stack/env && set +a           # in another
    .venv/bin/python benchmarks/soak.py --stack --files-per-hour 3000 --minutes 8
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import itertools
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(PROJECT_ROOT)]

import dagster as dg  # noqa: E402
from dagster import DagsterEventType as E  # noqa: E402
from soak_faults import CODE_SERVER, DAEMON, DISK, RUN, SPARK, WEBSERVER, Faults  # noqa: E402
from soak_load import EventBatches, Telemetry, Visits  # noqa: E402
from soak_ui import screenshots  # noqa: E402

from assets.overwriting.data_overwrite import VISITS_DAILY  # noqa: E402
from demo.__main__ import load_definitions  # noqa: E402
from demo.landing_files import LandingFiles  # noqa: E402
from demo.processes import supervised_platform, wait_until_serving  # noqa: E402
from resources import Lakehouse, LandingZone, SparkResource  # noqa: E402
from resources.spark_server import long_lived_spark, server_state  # noqa: E402

PLAN = {RUN: 12, SPARK: 4, CODE_SERVER: 1, DAEMON: 1, WEBSERVER: 1, DISK: 1}
BOUNDS = {RUN: 10, SPARK: 3, CODE_SERVER: 1, DAEMON: 1}
DISK_SIZE = "2g"
GOING = [dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]


def _instance_module():
    spec = importlib.util.spec_from_file_location(
        "lakehouse_instance", PROJECT_ROOT / "platform" / "instance.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def small_disk(folder: Path) -> bool:
    """Mounts a tmpfs of DISK_SIZE at `folder`; False where this machine allows none."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE}", "tmpfs", str(folder)],
        capture_output=True,
    )
    return mounted.returncode == 0


def unmount(folder: Path) -> None:
    subprocess.run(["umount", "-l", str(folder)], capture_output=True)


class Soak:
    def __init__(
        self,
        seed: int,
        base: Path,
        lakehouse: Lakehouse,
        landing: LandingFiles,
        files_per_hour: float | None = None,
        minutes: float = 5,
    ) -> None:
        self.rng = random.Random(seed)
        self.files_per_hour = files_per_hour
        # Telemetry's 40 % of the files, with reports to spare: a tool's reports must stay
        # within the lateness horizon, so a higher rate takes more tools.
        reports = (files_per_hour or 0) * minutes / 60 * 0.4 * 1.2
        subjects = max(3, math.ceil(reports / Telemetry.REPORTS_PER_SUBJECT))
        today = dt.date.today()
        first_monday = today - dt.timedelta(days=today.weekday() + 35)
        self.sources = {
            "visits": Visits(landing, first_monday, random.Random(seed * 10 + 1)),
            "telemetry": Telemetry(
                landing,
                dt.datetime(2026, 6, 1, tzinfo=dt.UTC),
                random.Random(seed * 10 + 2),
                subjects,
            ),
            "events": EventBatches(landing, random.Random(seed * 10 + 3)),
        }
        self.lakehouse = lakehouse
        self.landed: Counter[str] = Counter()
        self.landings: list[tuple[float, str, str]] = []
        """(when, asset, partition) of every file that changed a partition's data."""
        self.queued: list[tuple[float, int, int]] = []
        """(seconds into the soak, runs queued, runs going), sampled every 10 s."""
        self.began = time.monotonic()
        self.began_at = time.time()
        self.base = base
        self.log = (base / "soak.log").open("a")

    def say(self, line: str) -> None:
        stamp = f"[{time.monotonic() - self.began:6.1f} s]"
        print(f"{stamp} {line}", flush=True)

    def land(self, until: float) -> None:
        weights = {"visits": 0.35, "telemetry": 0.4, "events": 0.25}
        due = time.monotonic()
        while due < until:
            source = self.rng.choices(list(weights), weights=list(weights.values()))[0]
            self.landed[self.sources[source].land()] += 1
            if touched := self.sources[source].touched:
                self.landings.append((time.time(), *touched))
            # The next file is due a random gap after this one was: the time a landing
            # takes (a put into a bucket) does not slow the rate down.
            if self.files_per_hour:
                gap = 3600 / self.files_per_hour
                due += self.rng.uniform(0.5 * gap, 1.5 * gap)
            else:
                due += self.rng.uniform(2.5, 5.5)
            time.sleep(max(0.0, due - time.monotonic()))

    def sample_queue(self, instance: dg.DagsterInstance, stop: threading.Event) -> None:
        while not stop.wait(10):
            self.queued.append(
                (
                    time.monotonic() - self.began,
                    instance.get_runs_count(dg.RunsFilter(statuses=[dg.DagsterRunStatus.QUEUED])),
                    instance.get_runs_count(dg.RunsFilter(statuses=GOING)),
                )
            )

    def checks(self) -> dict[str, Callable[[], bool]]:
        visits, telemetry, events = (
            self.sources["visits"],
            self.sources["telemetry"],
            self.sources["events"],
        )
        lake = self.lakehouse
        return {
            "visits_daily": lambda: sorted(visits.daily(lake)) == sorted(visits.expected()),
            "visits (weekly exposition)": lambda: (
                sorted(visits.weekly(lake)) == sorted(visits.expected())
            ),
            "telemetry running totals": lambda: (
                sorted(telemetry.totals(lake)) == telemetry.expected_totals()
            ),
            "telemetry_hourly": lambda: (
                sorted(telemetry.hourly(lake)) == sorted(telemetry.expected_hourly())
            ),
            "user_events": lambda: sorted(events.stored(lake)) == sorted(events.expected()),
        }

    def correct(self) -> dict[str, bool]:
        result = {}
        for table, check in self.checks().items():
            try:
                result[table] = check()
            except Exception as error:  # a table not there yet, or being replaced
                result[table] = False
                print(f"   ({table}: {type(error).__name__}: {error})", file=self.log)
        return result


def schedule(rng: random.Random, seconds: float) -> list[tuple[float, str]]:
    """The moments of the planned faults, in order: spread over the load, none in its
    first 20 s (the first runs start then) nor its last 10."""
    moments = [
        (rng.uniform(20, seconds - 10), kind) for kind, count in PLAN.items() for _ in range(count)
    ]
    return sorted(moments)


def run_stats(instance: dg.DagsterInstance) -> dict[str, int]:
    records = instance.get_run_records()
    runs = [record.dagster_run for record in records]
    return {
        "launched": len(runs),
        "succeeded": sum(run.status == dg.DagsterRunStatus.SUCCESS for run in runs),
        "failed": sum(run.status == dg.DagsterRunStatus.FAILURE for run in runs),
        "retried by run retries": sum("dagster/parent_run_id" in run.tags for run in runs),
        "asked again by a sensor": sum("lakehouse/again_of" in run.tags for run in runs),
        "still queued or going": sum(not run.is_finished for run in runs),
    }


def queue_figures(state: Soak, load_ended: float, drained_after: float | None) -> str:
    """The run queue while files landed, and how long it took to drain once they stopped."""
    during = [(queued, going) for at, queued, going in state.queued if at <= load_ended]
    last = during[-1] if during else (0, 0)
    files = sum(n for what, n in state.landed.items() if "nothing left" not in what)
    rate = files / load_ended * 3600
    drained = f"{drained_after:.0f} s" if drained_after is not None else "never"
    return (
        f"Queue:        {files} files in {load_ended / 60:.1f} min ({rate:.0f} an hour); "
        f"runs queued at most {max((q for q, _ in during), default=0)}, "
        f"{last[0]} queued and {last[1]} going when the load ended; "
        f"queue empty {drained} after the load ended"
    )


def committed_after_landing(
    instance: dg.DagsterInstance, landings: list[tuple[float, str, str]], warm_from: float
) -> list[str]:
    """For each asset: seconds from a file landing to the first materialization of its
    partition that began after it (its run's commit; a run already going when the file
    landed may not hold it, so this is the lag's lower bound only when runs overlap).
    Also the 95th percentile of the files landed from `warm_from` on: on a fresh
    deployment the first runs create the tables and are each code path's first."""
    lags: dict[str, list[float]] = {}
    warm: dict[str, list[float]] = {}
    for landed_at, asset, partition in landings:
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(
                asset_key=dg.AssetKey(asset),
                asset_partitions=[partition],
                after_timestamp=landed_at,
            ),
            limit=1,
            ascending=True,
        ).records
        lag = records[0].timestamp - landed_at if records else float("inf")
        lags.setdefault(asset, []).append(lag)
        if landed_at >= warm_from:
            warm.setdefault(asset, []).append(lag)
    lines = []
    for asset, seconds in sorted(lags.items()):
        seconds.sort()
        median, worst = seconds[len(seconds) // 2], seconds[-1]
        later = sorted(warm.get(asset, []))
        lines.append(
            f"Landed -> committed, {asset}: median {median:.0f} s, 95th percentile "
            f"{_p95(seconds):.0f} s, worst {worst:.0f} s ({len(seconds)} files)"
            + (f"; after the first minute, 95th percentile {_p95(later):.0f} s" if later else "")
        )
    return lines


def _p95(ordered: list[float]) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]


def _spread(seconds: list[float]) -> str:
    seconds = sorted(seconds)
    return f"{seconds[len(seconds) // 2]:.1f} / {_p95(seconds):.1f} s"


def waits(instance: dg.DagsterInstance, since: float) -> list[str]:
    """Where a landed file's time goes, per sensor, median / 95th percentile: the gap
    between its ticks, then for each run it asked for the time queued (enqueued to
    launched), the run process's start (launched to its first event) and the run."""
    lines = []
    for state in instance.all_instigator_state():
        ticks = instance.get_ticks(state.instigator_origin_id, state.selector_id, after=since)
        at = sorted(tick.timestamp for tick in ticks)
        if len(at) > 2:
            gaps = [later - earlier for earlier, later in itertools.pairwise(at)]
            lines.append(f"Ticks of {state.instigator_name}: {_spread(gaps)} apart")
    phases: dict[str, dict[str, list[float]]] = {}
    kinds = {E.RUN_ENQUEUED, E.RUN_STARTING, E.RUN_START, E.RUN_SUCCESS}
    began = dt.datetime.fromtimestamp(since, dt.UTC)
    for run in instance.get_runs(dg.RunsFilter(created_after=began)):
        events = instance.all_logs(run.run_id, of_type=kinds)
        seen = {event.dagster_event_type: event.timestamp for event in events}
        if len(seen) == len(kinds):
            sensor = run.tags.get("dagster/sensor_name", "other")
            for phase, (start, end) in {
                "queued": (E.RUN_ENQUEUED, E.RUN_STARTING),
                "process start": (E.RUN_STARTING, E.RUN_START),
                "run": (E.RUN_START, E.RUN_SUCCESS),
            }.items():
                phases.setdefault(sensor, {}).setdefault(phase, []).append(seen[end] - seen[start])
    for sensor, spent in sorted(phases.items()):
        lines.append(
            f"Runs of {sensor} ({len(spent['run'])}): "
            + ", ".join(f"{phase} {_spread(seconds)}" for phase, seconds in spent.items())
        )
    return lines


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str]) -> int:
    # SIGTERM takes Ctrl-C's way out: the platform and the Spark are stopped, the disk
    # unmounted.
    signal.signal(signal.SIGTERM, _interrupted)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--minutes", type=float, default=5)
    parser.add_argument("--converge-minutes", type=float, default=10)
    parser.add_argument(
        "--files-per-hour",
        type=float,
        help="land files at this rate (default: one every 2.5 to 5.5 s, about 900 an hour)",
    )
    parser.add_argument("--no-faults", action="store_true", help="load alone: no fault")
    parser.add_argument(
        "--sensor-interval", type=int, default=3, help="SENSOR_INTERVAL_SECONDS (default 3)"
    )
    parser.add_argument(
        "--stack",
        action="store_true",
        help="the load alone on the fresh production profile whose variables the shell holds",
    )
    args = parser.parse_args(argv)
    if args.stack:
        return on_stack(args)
    base = PROJECT_ROOT / ".data" / "soak" / f"seed-{args.seed}"
    lake_root, landing, home = base / "lakehouse", base / "landing", base / "dagster"
    unmount(lake_root)
    shutil.rmtree(base, ignore_errors=True)
    disk = lake_root if small_disk(lake_root) else None
    _instance_module().write_instance(home, {})
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "LAKEHOUSE_ROOT": str(lake_root),
        "LANDING_ROOT": str(landing),
        "SENSOR_INTERVAL_SECONDS": str(args.sensor_interval),
    }
    os.environ.update(env)
    print(f"Soak of seed {args.seed}: {args.minutes:g} min of {_load(args)}; logs in {base}")
    if disk is None:
        print("   (no small file system could be mounted here: the disk is not filled)")
    try:
        with long_lived_spark(server_state(home), env) as spark_env:
            env.update(spark_env)
            os.environ.update(spark_env)
            with supervised_platform(PROJECT_ROOT, base, env) as platform:
                wait_until_serving(platform)
                print(f"Platform up: {platform.url} (webserver), daemon and code server")
                instance = dg.DagsterInstance.get()
                lakehouse = Lakehouse(root=str(lake_root), spark=SparkResource())
                files = LandingFiles(LandingZone(root=str(landing)))
                state = Soak(args.seed, base, lakehouse, files, args.files_per_hour, args.minutes)
                faults = (
                    None if args.no_faults else Faults(platform, instance, server_state(home), disk)
                )
                return soak(args, state, instance, faults, platform.url, platform.processes)
    finally:
        unmount(lake_root)


def _load(args) -> str:
    rate = f"{args.files_per_hour:g} files an hour" if args.files_per_hour else "load"
    return rate + ("" if args.no_faults else " and faults")


def on_stack(args) -> int:
    """The load on the production profile the environment points at (`--stack`)."""
    url = os.environ.get("DAGSTER_WEBSERVER_URL")
    if not url or not os.environ.get("LANDING_ROOT", "").startswith("s3://"):
        print("--stack: no stack in this shell (set -a && source .data/stack/env && set +a)")
        return 2
    args.no_faults = True
    base = PROJECT_ROOT / ".data" / "soak" / "stack"
    base.mkdir(parents=True, exist_ok=True)
    with dg.build_resources(load_definitions().resources) as built:
        lakehouse, landing = built.lakehouse, built.landing
        if lakehouse.exists(VISITS_DAILY):
            print(f"--stack: {lakehouse.root} already holds tables; start a fresh stack")
            return 2
        print(f"Soak on the stack: {args.minutes:g} min of {_load(args)} into {landing.root}")
        state = Soak(
            args.seed, base, lakehouse, LandingFiles(landing), args.files_per_hour, args.minutes
        )
        return soak(args, state, dg.DagsterInstance.get(), None, url, ())


def soak(args, state, instance, faults, url, processes) -> int:
    load_seconds = args.minutes * 60
    until = time.monotonic() + load_seconds
    lander = threading.Thread(target=state.land, args=(until,), daemon=True)
    lander.start()
    sampling = threading.Event()
    threading.Thread(target=state.sample_queue, args=(instance, sampling), daemon=True).start()
    last_fault = time.monotonic()
    for moment, kind in [] if args.no_faults else schedule(state.rng, load_seconds):
        while time.monotonic() < state.began + moment:
            time.sleep(0.2)
        while (hit := faults.inject(kind, state.rng)) is None and time.monotonic() < until:
            time.sleep(1)  # nothing to hit now (no run started): try again
        if hit:
            last_fault = time.monotonic()
            state.say(f"killed {kind}: {hit}" if kind != DISK else f"disk full: {hit}")
    lander.join()
    load_over = time.monotonic()
    if args.no_faults:
        last_fault = load_over
    if faults is not None and faults.disk_filled_until > last_fault:
        last_fault = faults.disk_filled_until
    state.say(f"load over: {sum(state.landed.values())} files landed; waiting for the tables")
    deadline = last_fault + args.converge_minutes * 60
    converged = None
    while time.monotonic() < deadline:
        correct = state.correct()
        if all(correct.values()):
            converged = time.monotonic() - last_fault
            break
        time.sleep(5)
    state.say(
        "every table correct"
        if converged is not None
        else f"not correct in time: {', '.join(t for t, ok in correct.items() if not ok)}"
    )
    drained = False
    while time.monotonic() < deadline + 300:
        if not run_stats(instance)["still queued or going"]:
            drained = True
            break
        time.sleep(5)
    drained_after = time.monotonic() - load_over
    sampling.set()
    after_drain = state.correct()
    print()
    if faults is not None:
        print("Faults:       " + ", ".join(f"{kind} {n}" for kind, n in faults.done.items()))
    print("Files landed: " + ", ".join(f"{what} {n}" for what, n in sorted(state.landed.items())))
    if processes:
        restarts = {p.name: p.starts - 1 for p in processes}
        print("Restarts:     " + ", ".join(f"{name} {n}" for name, n in restarts.items()))
    print("Runs:         " + ", ".join(f"{k} {v}" for k, v in run_stats(instance).items()))
    for table, ok in after_drain.items():
        print(f"   {table:<28} {'equal to plain Python' if ok else 'DIFFERENT'}")
    print(queue_figures(state, load_over - state.began, drained_after if drained else None))
    for line in committed_after_landing(instance, state.landings, state.began_at + 60):
        print(line)
    for line in waits(instance, state.began_at):
        print("   " + line)
    missed = [
        f"{kind} kills {faults.done[kind]} < {n}"
        for kind, n in BOUNDS.items()
        if not args.no_faults and faults.done[kind] < n
    ]
    if converged is None:
        missed.append(f"not correct within {args.converge_minutes:g} min of the last fault")
    if not drained or not all(after_drain.values()):
        missed.append("the queue did not drain, or a table changed after converging")
    if converged is not None:
        bound = args.converge_minutes * 60
        since = "the load ended" if args.no_faults else "the last fault"
        print(f"Converged {converged:.0f} s after {since} (bound {bound:.0f} s).")
    shots = screenshots(url, instance, state.base / "ui")
    if shots:
        print(f"The UI after the soak: {len(shots)} screenshots in {state.base / 'ui'}")
    print("PASS" if not missed else "FAIL: " + "; ".join(missed))
    return 0 if not missed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
