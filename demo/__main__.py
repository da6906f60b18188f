"""The main job: land visit files on the landing zone of the Dagster instance under
DAGSTER_HOME and let the daemon's sensor find the new days and launch their runs, and
declarative automation build their weeks; deliver late files and let them re-run only
the dirty days and weeks; then the same for
telemetry report files (demo/telemetry.py), devices change files (demo/updates.py), the
database-like sources (demo/database.py), the warehouse (demo/warehouse.py), and last
the tables by name over JDBC (demo/catalog.py). The
sensors run in a real `dagster dev`, the running `make dev` or one started here
(demo/dagster_dev.py), so their ticks and runs are in the UI like any others. Run twice:
the tables come out identical, and the report says whether this run reproduced the
previous run's checksums."""

from __future__ import annotations

import datetime as dt
import importlib.util
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import dagster as dg

from assets.overwriting import weekly_partitions
from assets.overwriting.calendar import week_start
from assets.overwriting.data_overwrite import VISITS_DAILY
from assets.overwriting.exposition import read_visits
from assets.partition_range import existing_keys
from assets.views import asset_relations
from demo import catalog, database, telemetry, updates, warehouse
from demo.dagster_dev import Dagster, DemoError, attach_or_start
from demo.dates import CHECKSUMS_FILE, START_FILE, DemoDates, demo_dates
from demo.generate import write_initial_files, write_late_files
from demo.landing_files import LandingFiles
from demo.report import checksum, compare_with_previous
from demo.runs import materializations
from resources.jvm_output import stderr_to
from resources.spark_server import long_lived_spark, server_state
from sensors import visits_late_files
from sensors.automation import AUTOMATION_SENSOR

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEMO_SENSOR_INTERVAL_SECONDS = 3
"""Below the daemon's own loop (Dagster's sensor daemon looks every 5 s), so every sensor
ticks on every loop: at 5 s a sensor whose last tick ended a moment later than the loop's
start skips a loop, and ticked every 5 to 10 s (the demo 278 s on a fresh instance; 197 s
at 3, the same checksums)."""


def weeks_now() -> Callable[[str], str | None]:
    """The week of visits_weekly a day of visits_daily belongs to (None: the week is not
    over, so not a partition yet), as the calendar stands now."""
    exists = existing_keys(weekly_partitions)

    def week_of(day: str) -> str | None:
        key = week_start(dt.date.fromisoformat(day)).isoformat()
        return key if exists(key) else None

    return week_of


def load_definitions() -> dg.Definitions:
    spec = importlib.util.spec_from_file_location(
        "lakehouse_definitions", PROJECT_ROOT / "platform" / "definitions.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_definitions(os.environ)


def main() -> int:
    started = time.monotonic()
    home = Path(os.environ.get("DAGSTER_HOME", PROJECT_ROOT / ".data" / "dagster"))
    log = home.parent / "demo.log"
    print(f"Spark, Dagster and set-up output: {log}")
    # Dagster's console log and whatever else writes to standard error go to the log
    # file: the terminal shows the report alone; an error still reaches it on the way out.
    with stderr_to(log), long_lived_spark(server_state(home), os.environ) as spark_env:
        # The demo's own reads, the `dagster dev` it may start and so every run attach
        # to the long-lived Spark (a `make dev` already up has its own).
        os.environ.update(spark_env)
        # The `dagster dev` the demo starts ticks its file sensors every few seconds: the
        # demo waits on them after each delivery (a `make dev` already up keeps its own).
        os.environ.setdefault("SENSOR_INTERVAL_SECONDS", str(DEMO_SENSOR_INTERVAL_SECONDS))
        defs = load_definitions()
        instance = dg.DagsterInstance.get()
        # Resolved as a run resolves them (dg.EnvVar settings read now), because the
        # report below also reads the tables directly.
        with (
            dg.build_resources(defs.resources) as built,
            attach_or_start(PROJECT_ROOT, instance, log=home.parent / "dagster-dev.log") as dagster,
        ):
            resources = {name: getattr(built, name) for name in defs.resources}
            try:
                return run_demo(
                    defs,
                    resources,
                    dagster,
                    demo_dates(home.parent),
                    started,
                    home.parent / CHECKSUMS_FILE,
                )
            except DemoError as error:
                print(f"\nThe demo stopped: {error}")
                return 1


def run_demo(
    defs: dg.Definitions,
    resources: dict,
    dagster: Dagster,
    dates: DemoDates,
    started: float,
    checksums_file: Path,
) -> int:
    lakehouse, landing = resources["lakehouse"], resources["landing"]
    instance = dagster.instance
    files = LandingFiles(landing)
    print(f"Dagster instance: {os.environ.get('DAGSTER_HOME')}")
    if dagster.started:
        print(f"Dagster:          {dagster.url} (`dagster dev` started for the demo)")
    else:
        print(f"Dagster:          {dagster.url} (the `make dev` already up does the work)")
    print(f"Landing zone:     {landing.root}")
    print(f"Lakehouse:        {lakehouse.root} (engine {lakehouse.engine})")
    print(f"Demo data from:   {dates.start} (kept in {checksums_file.parent / START_FILE})\n")

    visits_began = time.monotonic()
    sensor = [visits_late_files.name]
    since = since_start = time.time()
    days = dates.visit_days
    landed_files = write_initial_files(files, days)
    weeks = sorted({week_start(d) for d in days})
    print(f"1. Landed {landed_files} visit files for {len(days)} days ({days[0]} .. {days[-1]}),")
    print(f"   three of them delivered twice. The {sensor[0]} sensor finds the new days ...")
    launched = dagster.settle(sensor, since)
    print(f"   It launched {len(launched)} run(s) in {time.time() - since:.0f} s:")
    for run in launched:
        print(f"   {run.job_name:<18} {run.partition_key:<22} {run.tags['visits/trigger']}")
    print("   (adjacent days go in one range run); its next tick asked for nothing.")
    print(
        f"   Meanwhile the {AUTOMATION_SENSOR} sensor builds visits_weekly from the days (its "
        "condition: the asset's Automation tab); its runs are listed below.\n"
    )

    landed, since = since, time.time()
    late = write_late_files(files, days)
    print("2. Late delivery: " + ", ".join(late))
    print("   (plus one unchanged file delivered again)")
    launched = dagster.settle(sensor, since)
    # One wait for the weeks of both deliveries: automation builds them while the late
    # days run, and again for the weeks those days change.
    weekly = dagster.automated(
        "visits_weekly",
        VISITS_DAILY,
        landed,
        partition_of=weeks_now(),
        read_version="visits_daily_version",
    )
    print(
        f"   The sensor launched {len(launched)} run(s) of visits_daily; automation launched "
        f"{len(weekly)} of visits_weekly since the first delivery, for the weeks whose days "
        "changed:\n"
    )
    print(f"   {'asset':<14} {'partition':<11} {'rows':>6} {'delta v':>7}  why")
    for asset, runs in (("visits_daily", launched), ("visits_weekly", weekly)):
        for run in runs:
            changed = run.tags.get("visits/changed_files")
            why = f"changed: {changed}" if changed else "its days changed"
            for partition, metadata in materializations(instance, asset, run.run_id):
                # A day whose input is already committed is skipped (Transactional Writer).
                version = metadata.get("delta_version")
                print(
                    f"   {asset:<14} {partition:<11} {metadata['rows_inserted'].value:>6} "
                    f"{version.value if version else 'skip':>7}  {why}"
                )
    print("\n   The sensor's next tick asked for nothing.\n")

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
    print("3. Tables now:")
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
    parts = {"set-up": visits_began - started, "visits": time.monotonic() - visits_began}
    checksums = {
        "visits_daily": checksum(daily_rows) if same else "MISMATCH",
        "visits (weekly exposition)": checksum(exposed) if same else "MISMATCH",
    }
    for part, run in (
        ("telemetry", lambda: telemetry.run(dagster, resources, dates.telemetry_start)),
        ("updates", lambda: updates.run(dagster, resources, dates.update_days)),
        ("database", lambda: database.run(defs, resources, dagster, dates, since_start)),
        ("warehouse", lambda: warehouse.run(dagster, resources, dates.warehouse_start)),
    ):
        began = time.monotonic()
        checksums.update(run())
        parts[part] = time.monotonic() - began
    began = time.monotonic()
    by_name = catalog.run(lakehouse, len(daily_rows), asset_relations(defs))
    parts["catalog"] = time.monotonic() - began
    correct = "MISMATCH" not in checksums.values() and by_name
    print(compare_with_previous(checksums_file, checksums))
    print(
        "Run `make demo` again: work already committed is skipped, the rest rewritten; "
        "checksums and totals stay identical."
    )
    print(
        "Time per part: " + ", ".join(f"{part} {seconds:.0f} s" for part, seconds in parts.items())
    )
    print(f"Done in {time.monotonic() - started:.0f} s. `make dev` shows these runs in the UI.")
    return 0 if correct else 1


if __name__ == "__main__":
    sys.exit(main())
