"""A backfill of 42 days of `visits_daily`, as runs of one day against one run of the
range (its single-run backfill policy), measured side by side in one run:

- per-day runs: one run per day, each its own process with its own Spark session, three
  at a time (what a backfill launched before the policy: 42 runs, each booting a JVM);
- one run: `dagster asset materialize --partition-range FIRST...LAST`, one process and
  one Spark session, still one commit per day.

Both on the demo's 42 days of visits, each in a fresh lakehouse and Dagster home, through
the real CLI; the two tables are checked equal row for row.

Run: `.venv/bin/python benchmarks/backfill.py [--engine delta-spark] [--days N]
[--parallel 3]`.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

import dagster as dg  # noqa: E402

from demo.dates import DemoDates, default_start  # noqa: E402
from demo.generate import write_initial_files  # noqa: E402
from demo.landing_files import LandingFiles  # noqa: E402
from resources import Lakehouse, LandingZone, SparkResource  # noqa: E402

DEFINITIONS = PROJECT_ROOT / "platform" / "definitions.py"


def materialize(env: dict[str, str], *partition_args: str) -> None:
    command = [sys.executable, "-m", "dagster", "asset", "materialize", "-f", str(DEFINITIONS)]
    done = subprocess.run(
        [*command, "--select", "visits_daily", *partition_args],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"run {' '.join(partition_args)} failed:\n{done.stdout}{done.stderr}")


def environment(work: Path, landing: Path, engine: str) -> dict[str, str]:
    home = work / "dagster_home"
    home.mkdir(parents=True)
    with dg.DagsterInstance.from_config(str(home)):
        pass  # creates the instance's storage once, before runs start side by side
    return {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "LAKEHOUSE_ROOT": str(work / "lakehouse"),
        "LAKEHOUSE_ENGINE": engine,
        "LANDING_ROOT": str(landing),
    }


def visits(root: Path) -> list[tuple]:
    lakehouse = Lakehouse(root=str(root), spark=SparkResource())
    return sorted(
        (r["visit_id"], r["event_date"], r["page"], r["source_file"], r["source_line"])
        for r in lakehouse.read_arrow("visits_daily").to_pylist()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default="delta-rs", choices=["delta-rs", "delta-spark"])
    parser.add_argument("--days", type=int, default=42)
    parser.add_argument("--parallel", type=int, default=3)
    args = parser.parse_args()
    demo_days = DemoDates(default_start()).visit_days[: args.days]
    days = [day.isoformat() for day in demo_days]
    with tempfile.TemporaryDirectory(prefix="bench-backfill-") as scratch:
        landing = Path(scratch) / "landing"
        write_initial_files(LandingFiles(LandingZone(root=str(landing))), demo_days)
        per_day_env = environment(Path(scratch) / "per_day", landing, args.engine)
        one_run_env = environment(Path(scratch) / "one_run", landing, args.engine)

        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=args.parallel) as pool:
            list(pool.map(lambda day: materialize(per_day_env, "--partition", day), days))
        per_day = time.monotonic() - started

        started = time.monotonic()
        materialize(one_run_env, "--partition-range", f"{days[0]}...{days[-1]}")
        one_run = time.monotonic() - started

        same = visits(Path(scratch) / "per_day" / "lakehouse") == visits(
            Path(scratch) / "one_run" / "lakehouse"
        )
    print(f"visits_daily backfill of {len(days)} days, engine {args.engine}:")
    for label, seconds in (
        (f"{len(days)} runs of one day, {args.parallel} at a time", per_day),
        ("one run of the range", one_run),
    ):
        print(f"  {label + ':':<36} {seconds:8.1f} s")
    print(f"  one run / per-day runs = {one_run / per_day:.3f}; tables identical: {same}")
    if not same:
        raise SystemExit("the two backfills wrote different tables")


if __name__ == "__main__":
    main()
