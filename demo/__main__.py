"""The main job: generate visits, materialize every week and day on the Dagster instance
under DAGSTER_HOME, deliver late files, let the sensor pick the dirty partitions, run only
those, and report; then the same for telemetry report files (demo/telemetry.py) and the
devices change files (demo/updates.py). Run twice: the tables come out identical, and the
report says whether this run reproduced the previous run's checksums."""

from __future__ import annotations

import datetime as dt
import importlib.util
import os
import sys
import time
from collections import Counter
from pathlib import Path

import dagster as dg

from assets.overwriting.calendar import week_start
from assets.overwriting.data_overwrite import VISITS_DAILY
from assets.overwriting.exposition import read_visits
from demo import database, telemetry, updates, warehouse
from demo.generate import DAYS, write_initial_files, write_late_files
from demo.report import checksum, compare_with_previous
from demo.runs import run_job
from resources.jvm_output import stderr_to
from sensors import visits_late_files
from sensors.ticks import evaluate_tick

PROJECT_ROOT = Path(__file__).resolve().parent.parent
JOB_ASSETS = {"visits_daily_job": "visits_daily", "visits_weekly_job": "visits_weekly"}


def load_definitions() -> dg.Definitions:
    spec = importlib.util.spec_from_file_location(
        "lakehouse_definitions", PROJECT_ROOT / "platform" / "definitions.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_definitions(os.environ)


def materialize(defs, job_name: str, partitions: list[str], resources, instance, tags) -> list:
    """Each partition's metadata, from one run of `job_name` over `partitions`."""
    result = run_job(defs, job_name, partitions, resources=resources, instance=instance, tags=tags)
    asset = JOB_ASSETS[job_name]
    return [event.metadata for event in result.asset_materializations_for_node(asset)]


def main() -> int:
    started = time.monotonic()
    home = Path(os.environ.get("DAGSTER_HOME", PROJECT_ROOT / ".data" / "dagster"))
    log = home.parent / "demo.log"
    print(f"Spark, Dagster and set-up output: {log}")
    # Dagster's console log and whatever else writes to standard error go to the log
    # file: the terminal shows the report alone; an error still reaches it on the way out.
    with stderr_to(log):
        defs = load_definitions()
        # Resolved as a run resolves them (dg.EnvVar settings read now), because the
        # report below also reads the tables directly.
        with dg.build_resources(defs.resources) as built:
            resources = {name: getattr(built, name) for name in defs.resources}
            return run_demo(defs, resources, started, home.parent / "demo-checksums.json")


def run_demo(defs: dg.Definitions, resources: dict, started: float, checksums_file: Path) -> int:
    lakehouse, landing = resources["lakehouse"], resources["landing"]
    instance = dg.DagsterInstance.get()
    landing_root = Path(landing.root)
    print(f"Dagster instance: {os.environ.get('DAGSTER_HOME')}")
    print(f"Landing zone:     {landing_root}")
    print(f"Lakehouse:        {lakehouse.root} (engine {lakehouse.engine})\n")

    files = write_initial_files(landing_root)
    weeks = sorted({week_start(d) for d in DAYS})
    print(f"1. Landed {files} visit files for {len(DAYS)} days ({DAYS[0]} .. {DAYS[-1]}),")
    print("   three of them delivered twice. Backfilling every day and week ...")
    tags = {"demo/stage": "initial-load"}
    load_started = time.monotonic()
    days, mondays = [d.isoformat() for d in DAYS], [m.isoformat() for m in weeks]
    materialize(defs, "visits_daily_job", days, resources, instance, tags)
    materialize(defs, "visits_weekly_job", mondays, resources, instance, tags)
    print(
        f"   {len(DAYS)} daily and {len(weeks)} weekly partitions materialized in two runs "
        f"(one per asset, single-run backfills) in {time.monotonic() - load_started:.0f} s.\n"
    )

    sensor_resources = {"landing": landing, "lakehouse": lakehouse}
    baseline = evaluate_tick(visits_late_files, instance, None, sensor_resources)
    print(f"2. Sensor tick on unchanged files: {len(baseline.run_requests)} runs requested.\n")

    late = write_late_files(landing_root)
    print(
        "3. Late delivery: " + ", ".join(Path(p).relative_to(landing_root).as_posix() for p in late)
    )
    print("   (plus one unchanged file re-notified)")
    tick = evaluate_tick(visits_late_files, instance, baseline.cursor, sensor_resources)
    print(f"   Sensor requested {len(tick.run_requests)} runs:\n")
    print(f"   {'asset':<14} {'partition':<11} {'rows':>6} {'delta v':>7}  why")
    for request in tick.run_requests:
        tags = {**request.tags, "dagster/run_key": request.run_key, "demo/stage": "late-files"}
        [metadata] = materialize(
            defs, request.job_name, [request.partition_key], resources, instance, tags
        )
        # A day whose input is already committed is skipped (Transactional Writer).
        version = metadata["delta_version"].value if "delta_version" in metadata else "skip"
        print(
            f"   {JOB_ASSETS[request.job_name]:<14} {request.partition_key:<11} "
            f"{metadata['rows_inserted'].value:>6} {version:>7}  "
            f"changed: {request.tags['visits/changed_files']}"
        )
    settled = evaluate_tick(visits_late_files, instance, tick.cursor, sensor_resources)
    print(f"\n   Next sensor tick: {len(settled.run_requests)} runs requested.\n")

    spark = resources["spark"].session()
    daily = lakehouse.read_arrow(VISITS_DAILY).to_pylist()
    per_day = Counter(r["event_date"] for r in daily)
    last_version = {}
    for entry in reversed(lakehouse.history(VISITS_DAILY)):
        last_version[entry.metadata.get("partition_key")] = entry.version

    def content(rows: list[dict]) -> list[tuple]:
        return [
            (
                r["visit_id"],
                r["user_id"],
                r["event_time"],
                r["page"],
                r["context"],
                r["source_file"],
            )
            for r in rows
        ]

    exposed = content(read_visits(lakehouse, spark).toArrow().to_pylist())
    per_week = Counter(week_start(r[2].date()) for r in exposed)
    print("4. Tables now:")
    print(
        f"   {'week':<11} {'weekly rows':>11} {'daily rows':>10}  daily partitions (rows @ version)"
    )
    for monday in weeks:
        days = [monday + dt.timedelta(days=i) for i in range(7)]
        detail = " ".join(
            f"{d:%m-%d}:{per_day[d]}@v{last_version.get(d.isoformat())}" for d in days
        )
        daily_total = sum(per_day[d] for d in days)
        print(f"   {monday!s:<11} {per_week[monday]:>11} {daily_total:>10}  {detail}")
    daily_rows = content(daily)
    print(f"\n   visits_daily:  {len(daily_rows)} rows, content checksum {checksum(daily_rows)}")
    print(
        f"   visits (weekly exposition): {len(exposed)} rows, content checksum {checksum(exposed)}"
    )
    same = sorted(daily_rows) == sorted(exposed)
    print(f"   Daily table and weekly exposition hold the same visits: {'yes' if same else 'NO'}")
    print()
    checksums = {
        "visits_daily": checksum(daily_rows) if same else "MISMATCH",
        "visits (weekly exposition)": checksum(exposed) if same else "MISMATCH",
        **telemetry.run(defs, resources, instance),
        **updates.run(defs, resources, instance),
        **database.run(defs, resources, instance, DAYS),
        **warehouse.run(defs, resources, instance),
    }
    correct = "MISMATCH" not in checksums.values()
    print(compare_with_previous(checksums_file, checksums))
    print(
        "Run `make demo` again: work already committed is skipped, the rest rewritten; "
        "checksums and totals stay identical."
    )
    print(f"Done in {time.monotonic() - started:.0f} s. `make dev` shows these runs in the UI.")
    return 0 if correct else 1


if __name__ == "__main__":
    sys.exit(main())
