"""What a file sensor's tick costs as the landing zone grows, side by side in one run.

For each file sensor, a tick that finds `--new` new files among `--small` known files,
against one that finds as many new files among `--large` known ones (the known files are
in the sensor's state: a first tick saw them). A tick's cost should follow the files that
changed, not the files known: the ratio large / small is the figure.

- visits_late_files: `visits/date=YYYY-MM-DD/*.jsonl` over the days of 2025; the new
  files land in ten of those days.
- event_batch_files: `events/<batch_id>.jsonl`, one batch a file.
- change_files: `devices_cdc/YYYY-MM-DD.csv`, one file a day, so at most one file per
  day of its calendar: `--small-days` against `--large-days` known days, ten new.
- enriched_run_directories: `enriched/run=<id>/_SUCCESS`, one finished run directory a
  file (its data files are not written: the sensor looks at `_SUCCESS` alone).
- telemetry_files: `telemetry/<subject>/*.csv` over 20 subjects, every known file
  ingested (one `telemetry_file_state` row each), and before each tick a run's commit of
  the states of the files the tick before found, as `telemetry_raw` commits them.

Each tick is evaluated as the daemon evaluates it (the sensor's function with its
resources and a real SQLite instance), in one process as the code server evaluates them:
five ticks in a row, each finding its own new files from the cursor the tick before it
stored; the median of the five. (The first tick of a process lists every file and reads
the state from its table: it is the set-up here, not a measured tick.)

With `--object-store N`, the visits sensor's tick again with the files in a bucket of an
S3 server (moto's, started on loopback), among `--small` and N known objects, twice: with
no notification queue a tick lists the bucket's folder whole, one request per 1,000 keys;
with the queue the bucket's event notifications go to (SQS, moto's too), a tick takes the
objects the queue names and looks at those alone.

Run: `.venv/bin/python benchmarks/sensor_ticks.py [--small 1000] [--large 100000] [--new 100]
[--object-store 20000]`.
"""

import argparse
import datetime as dt
import hashlib
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(PROJECT_ROOT), str(PROJECT_ROOT / "tests")]

import dagster as dg  # noqa: E402
from ticks import evaluate_tick  # noqa: E402

from assets.telemetry import control  # noqa: E402
from assets.telemetry.settings import TelemetrySettings  # noqa: E402
from resources import Lakehouse, LandingZone, SparkResource  # noqa: E402
from resources.s3_landing import S3LandingZone  # noqa: E402
from sensors import (  # noqa: E402
    change_files,
    enriched_run_directories,
    event_batch_files,
    telemetry_files,
    visits_late_files,
)

FIRST_DAY = dt.date(2025, 1, 1)
DAYS = 365
REPEATS = 5


def visit_file(root: Path, index: int, *, new: bool = False) -> str:
    day = FIRST_DAY + dt.timedelta(days=(index % 10) * 7 if new else index % DAYS)
    folder = root / "visits" / f"date={day.isoformat()}"
    folder.mkdir(parents=True, exist_ok=True)
    row = {"visit_id": f"v{index}", "user_id": "u", "event_time": f"{day}T10:00:00Z"}
    name = f"{'late' if new else 'part'}-{index:06d}.jsonl"
    (folder / name).write_text(json.dumps(row) + "\n")
    return f"visits/date={day.isoformat()}/{name}"


def batch_file(root: Path, index: int, *, new: bool = False) -> str:
    folder = root / "events"
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{'new' if new else 'batch'}-{index:06d}.jsonl"
    (folder / name).write_text(json.dumps({"event_id": str(index)}) + "\n")
    return f"events/{name}"


def cdc_file(root: Path, index: int, *, new: bool = False) -> str:
    folder = root / "devices_cdc"
    folder.mkdir(parents=True, exist_ok=True)
    day = dt.date(2024, 1, 1) + dt.timedelta(days=index)
    (folder / f"{day.isoformat()}.csv").write_text(f"type;full_name;version\nphone;P{index};1\n")
    return f"devices_cdc/{day.isoformat()}.csv"


def run_directory(root: Path, index: int, *, new: bool = False) -> str:
    """A finished enriched run directory: one a second from 2024-01-01."""
    started = dt.datetime(2024, 1, 1) + dt.timedelta(seconds=index)
    path = f"enriched/run={started:%Y-%m-%d-%H-%M-%S}/_SUCCESS"
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_bytes(b"")
    return path


REPORT = b"ts,in,out\n"


def report_file(root: Path, index: int, *, new: bool = False) -> str:
    path = f"telemetry/Tool{index % 20:02d}/{'late' if new else 'report'}-{index:06d}.csv"
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_bytes(REPORT)
    return path


def ingested(resources: dict, paths: list[str]) -> None:
    """The file states a `telemetry_raw` run commits for the report files at `paths`."""
    lakehouse, now = resources["lakehouse"], dt.datetime.now(dt.UTC)
    digest = hashlib.sha256(REPORT).hexdigest()
    states = [
        control.FileState(
            source=path,
            subject_key=path.split("/")[1],
            content_hash=digest,
            size=len(REPORT),
            mtime_ns=0,
            ingested_bytes=len(REPORT),
            ingested_hash=digest,
            logical_start=None,
            logical_end=None,
            rows=0,
            process_count=1,
            status="ingested",
            attempts=0,
            last_error=None,
            next_attempt_at=None,
            last_seen=now,
            raw_version=None,
            dirty_start=None,
            dirty_end=None,
        )
        for path in paths
    ]
    metadata = {"dagster_run_id": "benchmark", "asset_key": "telemetry_raw"}
    control.ensure_table(lakehouse, control.FILE_STATE, metadata)
    control.save_file_states(
        lakehouse, states, handled_reingests=set(), metadata=metadata, app_transaction=None
    )


def tick_cost(
    sensor: dg.SensorDefinition,
    write: Callable[..., str],
    known: int,
    new: int,
    after_tick: Callable[[dict, list[str]], None] | None,
    bucket: Callable[[Path, list[str]], LandingZone] | None = None,
) -> tuple[float, int]:
    """Seconds of a tick finding `new` files among `known` (median of REPEATS ticks in a
    row), and the runs the last one requested. `after_tick` (the work of the runs a tick
    asked for) is given the files each tick found, and is not timed. With `bucket`, the
    files written are put into a bucket, whose landing zone it gives."""
    work = Path(tempfile.mkdtemp(prefix="bench-sensors-"))
    try:
        landing_root = work / "landing"
        found = [write(landing_root, index) for index in range(known)]
        landing = LandingZone(root=str(landing_root))
        if bucket is not None:
            landing = bucket(landing_root, found)
        resources = {
            "landing": landing,
            "lakehouse": Lakehouse(root=str(work / "lakehouse"), spark=SparkResource()),
            "telemetry_settings": TelemetrySettings(),
        }
        instance = dg.DagsterInstance.from_config(str(_home(work)))
        cursor = evaluate_tick(sensor, instance, None, resources).cursor
        seconds, requested = [], 0
        for repeat in range(REPEATS):
            if after_tick is not None:
                after_tick(resources, found)
            found = [
                write(landing_root, index, new=True)
                for index in range(known + repeat * new, known + (repeat + 1) * new)
            ]
            if bucket is not None:
                bucket(landing_root, found)
            started = time.perf_counter()
            result = evaluate_tick(sensor, instance, cursor, resources)
            seconds.append(time.perf_counter() - started)
            requested, cursor = len(result.run_requests), result.cursor
        instance.dispose()
        return statistics.median(seconds), requested
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _home(work: Path) -> Path:
    home = work / "dagster"
    home.mkdir()
    shutil.copy(PROJECT_ROOT / "platform" / "dagster.yaml", home / "dagster.yaml")
    return home


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--new", type=int, default=100)
    parser.add_argument("--small-days", type=int, default=100)
    parser.add_argument("--large-days", type=int, default=900)
    parser.add_argument("--object-store", type=int, default=0, metavar="LARGE")
    args = parser.parse_args()
    cases = [
        ("visits_late_files", visits_late_files, visit_file, args.small, args.large, args.new),
        ("event_batch_files", event_batch_files, batch_file, args.small, args.large, args.new),
        ("change_files", change_files, cdc_file, args.small_days, args.large_days, 10),
        ("telemetry_files", telemetry_files, report_file, args.small, args.large, args.new),
        (
            "enriched_run_directories",
            enriched_run_directories,
            run_directory,
            args.small,
            args.large,
            args.new,
        ),
    ]
    work_of_runs = {"telemetry_files": ingested}
    print(f"A tick finding new files among known ones (median of {REPEATS} ticks):")
    for name, sensor, write, small, large, new in cases:
        runs = work_of_runs.get(name)
        small_tick, small_runs = tick_cost(sensor, write, small, new, runs)
        large_tick, large_runs = tick_cost(sensor, write, large, new, runs)
        print(
            f"  {name:24s} {new:4d} new among {small:7,d}: {small_tick:6.2f} s ({small_runs} "
            f"runs); among {large:7,d}: {large_tick:6.2f} s ({large_runs} runs); "
            f"large / small = {large_tick / small_tick:.2f} (bounds: 2 s, 1.5)",
            flush=True,
        )
    if args.object_store:
        object_store_ticks(args.small, args.object_store, args.new)


def into_bucket(
    client, storage, name: str, notify: Callable[[], str] | None = None
) -> Callable[[Path, list[str]], LandingZone]:
    """`tick_cost`'s `bucket`: a fresh bucket `name` of the S3 server `client` and
    `storage` reach, into which the files written are put. With `notify`, once the known
    objects are in, the bucket's notifications go to the queue it makes (its URL)."""
    client.create_bucket(Bucket=name)
    queue = ""

    def put(root: Path, paths: list[str]) -> LandingZone:
        nonlocal queue
        with ThreadPoolExecutor(16) as pool:
            body = {path: (root / path).read_bytes() for path in paths}
            list(pool.map(lambda p: client.put_object(Bucket=name, Key=p, Body=body[p]), body))
        if notify is not None and not queue:  # after the known objects: the first tick lists them
            queue = notify()
        return S3LandingZone(root=f"s3://{name}", s3=storage, queue_url=queue)

    return put


def object_store_ticks(small: int, large: int, new: int) -> None:
    """The visits sensor's tick with its files in a bucket of moto's S3 server, listing
    whole and following the bucket's notification queue."""
    import servers

    with servers.s3_server() as endpoint:
        client, storage = servers.s3_client(endpoint), servers.s3_storage(endpoint)
        names = (f"bench-{n}" for n in range(1_000_000))

        def bucket_for(notified: bool) -> Callable[[Path, list[str]], LandingZone]:
            name = next(names)
            notify = (lambda: servers.notify_queue(endpoint, name)) if notified else None
            return into_bucket(client, storage, name, notify)

        for notified, how in ((False, "a full paged listing"), (True, "the notification queue")):
            small_tick, _ = tick_cost(
                visits_late_files, visit_file, small, new, None, bucket_for(notified)
            )
            large_tick, _ = tick_cost(
                visits_late_files, visit_file, large, new, None, bucket_for(notified)
            )
            label = "(S3, queue)" if notified else "(S3, listing)"
            print(
                f"  visits_late_files {label:14s} {new:4d} new among {small:7,d}: "
                f"{small_tick:6.2f} s; among {large:7,d}: {large_tick:6.2f} s; large / small = "
                f"{large_tick / small_tick:.2f} ({how} at every tick)",
                flush=True,
            )


if __name__ == "__main__":
    main()
