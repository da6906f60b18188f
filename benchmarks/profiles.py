"""The embedded default and the production profile, side by side in one run.

- The embedded default: tables and landed files on the local disk, the Dagster instance
  in SQLite, runs attached to a long-lived Spark on `local[*]`.
- The production profile: `make stack` (platform/stack.py) brought up here in a scratch
  folder: tables in s3proxy's bucket, files landed in its other bucket, the instance in
  Postgres, runs attached to the long-lived Spark on a standalone cluster.

Measured on each, through the real CLI as a user's runs go:
1. visits_daily (3 visits a day): a one-day `dagster asset materialize` and a `--days`
   range run, after one untimed day that creates the tables and registers them (once in
   a deployment's life). On the production profile once more with
   DAGSTER_EVENT_BATCH_SIZE=0 (Dagster stores a run's events one at a time), on days of
   their own in the same table, before the stack's own setting (1000) is measured.
2. `make demo`'s total time (`python -m demo`) on a fresh deployment: every check must
   say yes and every checksum must equal the other profile's. The production profile's
   demo gets a stack of its own (the range runs' tables would change its checksums).

Run: `.venv/bin/python benchmarks/profiles.py [--days 364] [--skip-demo]` (about 30
minutes on 2 cores). Every server is stopped by its pid on the way out.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(PROJECT_ROOT), str(PROJECT_ROOT / "tests")]

import run_cost  # noqa: E402  (benchmarks/, this script's folder)
import servers  # noqa: E402  (tests/: the stack, brought up and down by pid)
from deployments import CHECKSUM  # noqa: E402
from pyarrow import fs as pafs  # noqa: E402

from resources.object_store import storage_from_environment  # noqa: E402
from resources.spark_server import long_lived_spark  # noqa: E402

DEMO_INTERVAL = "5"
"""The stack's sensor interval while the demo waits on its sensors."""


def day_and_range(env: dict[str, str], days: list[str], spare: str) -> tuple[float, float]:
    """Seconds of a one-day run (of `spare`) and of a range run over `days`."""
    return (
        run_cost.materialize(env, "--partition", spare),
        run_cost.materialize(env, "--partition-range", f"{days[0]}...{days[-1]}"),
    )


def say(profile: str, what: str, one_day: float, ranged: float, days: int) -> None:
    print(
        f"  {profile:<20} {what:<34} one day {one_day:5.1f} s, {days} days {ranged:6.1f} s, "
        f"range / one day = {ranged / one_day:.2f}",
        flush=True,
    )


def upload(local: Path, env: dict[str, str], root: str) -> None:
    """The files under `local` into the bucket folder `root` (`bucket/prefix`)."""
    storage = storage_from_environment(env, deferred=False)
    pafs.copy_files(
        str(local),
        root,
        source_filesystem=pafs.LocalFileSystem(),
        destination_filesystem=storage.filesystem(),
        use_threads=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=364)
    parser.add_argument("--skip-demo", action="store_true")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-profiles-"))
    scratch.chmod(0o755)  # Postgres runs as `nobody` under root
    landing = scratch / "landing"
    # Two ranges and three single days, ending within a year of run_cost's first day (and
    # so before today: visits_daily has no partition of a day to come).
    start = run_cost.FIRST_DAY - dt.timedelta(days=args.days)
    every_day = [start + dt.timedelta(days=i) for i in range(2 * args.days + 3)]
    for day in every_day:
        run_cost.write_day(landing, day, 3)
    keys = [day.isoformat() for day in every_day]
    first_range, second_range = keys[: args.days], keys[args.days : 2 * args.days]
    untimed, spare, spare_again = keys[-3:]
    print(f"visits_daily, one day against {args.days} days in one range run:", flush=True)

    with long_lived_spark(scratch / "spark", os.environ, say=lambda line: None) as spark:
        embedded = run_cost.deployment(scratch / "embedded", landing, spark)
        run_cost.materialize(embedded, "--partition", untimed)
        one_day, ranged = day_and_range(embedded, first_range, spare)
        say("embedded default", "(SQLite, local disk)", one_day, ranged, args.days)

    with servers.production_stack() as stack:
        env = {k: v for k, v in os.environ.items() if k not in run_cost.SPARK_VARIABLES}
        env |= stack | {"LANDING_ROOT": "s3://landing/bench"}
        upload(landing, env, "landing/bench")
        run_cost.materialize(env, "--partition", untimed)
        for batch, days, day in (("0", second_range, spare_again), ("1000", first_range, spare)):
            one_day, ranged = day_and_range(env | {"DAGSTER_EVENT_BATCH_SIZE": batch}, days, day)
            what = f"(DAGSTER_EVENT_BATCH_SIZE={batch})"
            say("production profile", what, one_day, ranged, args.days)

    if args.skip_demo:
        return
    print("The demo's total time (`python -m demo`, fresh deployments):", flush=True)
    embedded_seconds = run_cost.demo_time(scratch / "demo")
    embedded_sums = CHECKSUM.findall((scratch / "demo" / "demo.out").read_text())
    print(f"  embedded default     {embedded_seconds:6.0f} s", flush=True)
    with servers.production_stack(SENSOR_INTERVAL_SECONDS=DEMO_INTERVAL) as stack:
        env = {k: v for k, v in os.environ.items() if k not in run_cost.SPARK_VARIABLES}
        seconds = run_cost.run_demo(env | stack, scratch / "stack-demo.out")
    sums = CHECKSUM.findall((scratch / "stack-demo.out").read_text())
    same = "the same checksums" if sums == embedded_sums else "DIFFERENT checksums"
    print(f"  production profile   {seconds:6.0f} s   ({same}; sensors every {DEMO_INTERVAL} s)")


if __name__ == "__main__":
    main()
