"""Telemetry cost ratios and throughput, measured side by side in one run.

1. Late file vs full recompute: one subject with a long history; a file landing at 90%
   (and at 10%) of it, end to end (ingest + running totals + hourly), against
   recomputing the subject's derived tables from scratch. Pass: 90% <= 0.15 x full.
2. Append vs whole file: appending 1% to a large file against ingesting the whole file.
   Pass: <= 0.05.
3. Re-notifying 1,000 unchanged files: the sensor tick's time and the runs it asks
   for (pass: none).
4. Steady state: 4-hour report files of a few hundred rows for 20 tools, delivered a
   batch per tick; files per hour through sensor + runs (in one warm process), and the
   cost of a run as its own `dagster asset materialize` process (what the daemon
   launches). Target: >= 5,000 files an hour.

Timings on these 2-core machines are noisy: the ratios, taken within this one run, are
the figures. Exits 1 if a bound fails. Run: `.venv/bin/python benchmarks/telemetry.py`.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from telemetry_history import START, ReportFile, report, write  # noqa: E402

from assets.telemetry import TelemetrySettings, control  # noqa: E402
from assets.telemetry import assets as telemetry_assets  # noqa: E402
from assets.telemetry.derive import reconcile_hourly, reconcile_totals  # noqa: E402
from assets.telemetry.ingest import SubjectIngest  # noqa: E402
from resources import Lakehouse, LandingZone, SparkResource  # noqa: E402
from sensors import telemetry_files  # noqa: E402

HISTORY_FILES, ROWS_PER_HISTORY_FILE = 400, 2_500  # 1M rows for one subject
BIG_FILE_ROWS = 200_000
STEADY_SUBJECTS, STEADY_TICKS, STEADY_ROWS = 20, 10, 300
SETTINGS = TelemetrySettings(lateness_horizon_hours=24 * 365)


def deployment(root: Path) -> tuple[Lakehouse, LandingZone]:
    (root / "landing").mkdir(parents=True)
    spark = SparkResource(master="local[1]")  # never started: telemetry needs no Spark
    return Lakehouse(root=str(root / "lake"), spark=spark), LandingZone(root=str(root / "landing"))


def meta(**facts):
    return {"benchmark": "telemetry", **facts}


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def subject_run(lakehouse: Lakehouse, landing: LandingZone, subject: str) -> None:
    """What one run of the subject's job does (the asset bodies without Dagster)."""
    SubjectIngest(
        lakehouse=lakehouse,
        landing=landing,
        settings=SETTINGS,
        subject_key=subject,
        run_id="bench",
        commit_metadata=meta,
        now=dt.datetime.now(dt.UTC),
    ).run()
    derive(lakehouse, subject)


def derive(lakehouse: Lakehouse, subject: str) -> None:
    reconcile_totals(lakehouse, subject, meta, print)
    reconcile_hourly(lakehouse, subject, meta, print)


def late_file_vs_full_recompute(root: Path) -> dict[str, float]:
    lakehouse, landing = deployment(root)
    rng = random.Random(1)
    files = [
        report("Tool01", START + dt.timedelta(hours=4 * i), ROWS_PER_HISTORY_FILE, rng)
        for i in range(HISTORY_FILES)
    ]
    late = {10: files[HISTORY_FILES // 10], 90: files[HISTORY_FILES * 9 // 10]}
    for f in files:
        if f not in late.values():
            write(landing.root, f.path, f.content)
    subject_run(lakehouse, landing, "Tool01")
    times = {}
    for share in (90, 10):
        write(landing.root, late[share].path, late[share].content)
        times[f"late_{share}"] = timed(lambda: subject_run(lakehouse, landing, "Tool01"))
    full = []
    for _ in range(3):
        for table in (control.TOTALS, control.HOURLY):
            shutil.rmtree(lakehouse.uri(table))
        full.append(timed(lambda: derive(lakehouse, "Tool01")))
    times["full"] = statistics.median(full)
    return times


def append_vs_whole_file(root: Path) -> dict[str, float]:
    lakehouse, landing = deployment(root)
    big = report("Tool01", START, BIG_FILE_ROWS, random.Random(2), hours=24 * 30)
    content = big.content
    cut = content.index(b"\n", int(len(content) * 0.99)) + 1
    whole, append = [], []
    for attempt in range(3):
        path = f"telemetry/Tool01/big{attempt}.csv"
        write(landing.root, path, content[:cut])
        whole.append(timed(lambda: subject_run(lakehouse, landing, "Tool01")))
        write(landing.root, path, content)
        append.append(timed(lambda: subject_run(lakehouse, landing, "Tool01")))
    return {"whole": statistics.median(whole), "append": statistics.median(append)}


def renotify(root: Path) -> dict[str, float]:
    lakehouse, landing = deployment(root)
    rng = random.Random(3)
    files = [
        report(f"Tool{i % 20:02d}", START + dt.timedelta(hours=4 * (i // 20)), 50, rng)
        for i in range(1000)
    ]
    for f in files:
        write(landing.root, f.path, f.content)
    with dg.instance_for_test() as instance:
        resources = {"landing": landing, "lakehouse": lakehouse, "telemetry": SETTINGS}

        def tick(cursor):
            with dg.build_sensor_context(
                instance=instance, cursor=cursor, resources=resources
            ) as c:
                return telemetry_files(c)

        first = tick(None)
        for key in {f.subject for f in files}:
            instance.add_dynamic_partitions("subjects", [key])
            subject_run(lakehouse, landing, key)
        settled = tick(first.cursor)
        for f in files:  # re-notified: touched, unchanged
            full = Path(landing.root) / f.path
            os.utime(full, ns=(0, full.stat().st_mtime_ns + 10**9))
        start = time.perf_counter()
        again = tick(settled.cursor)
        renotify_tick = time.perf_counter() - start
        return {
            "first_tick_runs": len(first.run_requests),
            "renotify_tick_s": renotify_tick,
            "renotify_runs": len(again.run_requests),
        }


def steady_state(root: Path) -> dict[str, float]:
    lakehouse, landing = deployment(root)
    rng = random.Random(4)
    subjects = [f"Tool{i:02d}" for i in range(1, STEADY_SUBJECTS + 1)]
    resources = {"landing": landing, "lakehouse": lakehouse, "telemetry": SETTINGS}
    delivered = 0
    with dg.instance_for_test() as instance:
        cursor = None
        start = time.perf_counter()
        for tick in range(STEADY_TICKS):
            batch: list[ReportFile] = [
                report(s, START + dt.timedelta(hours=4 * tick), STEADY_ROWS, rng) for s in subjects
            ]
            for f in batch:
                write(landing.root, f.path, f.content)
            delivered += len(batch)
            with dg.build_sensor_context(
                instance=instance, cursor=cursor, resources=resources
            ) as c:
                result = telemetry_files(c)
            cursor = result.cursor
            for request in result.dynamic_partitions_requests:
                instance.add_dynamic_partitions(
                    request.partitions_def_name, list(request.partition_keys)
                )
            for request in result.run_requests:
                dg.materialize(
                    telemetry_assets,
                    partition_key=request.partition_key,
                    resources=resources,
                    instance=instance,
                    tags=request.tags,
                )
        elapsed = time.perf_counter() - start
    runs = STEADY_TICKS * STEADY_SUBJECTS
    return {
        "files": delivered,
        "seconds": elapsed,
        "runs": runs,
        "files_per_hour": delivered / elapsed * 3600,
    }


def run_process(root: Path, files_per_run: int) -> dict[str, float]:
    """One `dagster asset materialize` process for a subject with `files_per_run` files."""
    lakehouse, landing = deployment(root)
    rng = random.Random(5)
    for i in range(files_per_run):
        f = report("Tool01", START + dt.timedelta(hours=4 * i), STEADY_ROWS, rng)
        write(landing.root, f.path, f.content)
    home = root / "dagster"
    home.mkdir()
    (home / "dagster.yaml").write_text((ROOT / "platform" / "dagster.yaml").read_text())
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "LAKEHOUSE_ROOT": lakehouse.root,
        "LANDING_ROOT": landing.root,
    }
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions("subjects", ["Tool01"])
    command = [
        sys.executable,
        "-m",
        "dagster",
        "asset",
        "materialize",
        "-f",
        "platform/definitions.py",
        "--select",
        "telemetry_raw,telemetry_running_totals,telemetry_hourly",
        "--partition",
        "Tool01",
    ]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    rows = lakehouse.read_arrow(control.RAW).num_rows
    if rows != files_per_run * STEADY_ROWS:
        raise RuntimeError(f"the run ingested {rows} rows, expected {files_per_run * STEADY_ROWS}")
    return {"seconds": elapsed, "files": files_per_run}


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main() -> int:
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        late = late_file_vs_full_recompute(tmp_path / "late")
        r90, r10 = late["late_90"] / late["full"], late["late_10"] / late["full"]
        print(f"1. late file, subject of {HISTORY_FILES * ROWS_PER_HISTORY_FILE:,} rows:")
        print(f"   full recompute of totals + hourly: {late['full']:.3f} s")
        print(
            f"   late file at 90%: {late['late_90']:.3f} s -> ratio {r90:.3f} "
            f"(bound 0.15, {verdict(r90 <= 0.15)})"
        )
        print(f"   late file at 10%: {late['late_10']:.3f} s -> ratio {r10:.3f} (reported)")
        failed |= r90 > 0.15

        append = append_vs_whole_file(tmp_path / "append")
        ratio = append["append"] / append["whole"]
        print(
            f"2. file of {BIG_FILE_ROWS:,} rows: whole {append['whole']:.3f} s, "
            f"+1% append {append['append']:.3f} s -> ratio {ratio:.3f} "
            f"(bound 0.05, {verdict(ratio <= 0.05)})"
        )
        failed |= ratio > 0.05

        notify = renotify(tmp_path / "renotify")
        print(
            f"3. 1,000 files re-notified unchanged: sensor tick {notify['renotify_tick_s']:.3f} s,"
            f" runs requested {notify['renotify_runs']} (the first tick asked for "
            f"{notify['first_tick_runs']}) ({verdict(notify['renotify_runs'] == 0)})"
        )
        failed |= notify["renotify_runs"] != 0

        steady = steady_state(tmp_path / "steady")
        print(
            f"4. steady state, {STEADY_SUBJECTS} tools x {STEADY_TICKS} ticks, "
            f"{STEADY_ROWS}-row 4-hour files, one run per tool per tick:"
        )
        print(
            f"   {steady['files']} files in {steady['seconds']:.1f} s in one warm process "
            f"-> {steady['files_per_hour']:,.0f} files/hour"
        )
        for files_per_run in (1, 20):
            process = run_process(tmp_path / f"process{files_per_run}", files_per_run)
            per_hour = files_per_run / process["seconds"] * 3600
            print(
                f"   one run as its own process (no Spark started), {files_per_run} file(s): "
                f"{process['seconds']:.2f} s -> {per_hour:,.0f} files/hour per run slot"
            )
    print("FAIL" if failed else "PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
