"""The embedded default and the production profile, side by side in one run.

- The embedded default: tables and landed files on the local disk, the Dagster instance
  in SQLite, runs attached to a long-lived Spark on `local[*]`.
- The production profile: `make stack` (platform/stack.py) brought up here in a scratch
  folder: tables in s3proxy's bucket, files landed in its other bucket, the instance in
  Postgres, runs attached to the long-lived Spark on a standalone cluster.

Measured on each, with each profile's own resources (resolved from its environment as
its runs resolve them):
1. visits_daily (3 visits a day): a one-day `dagster asset materialize` and a `--days`
   range run, after one untimed day that creates the tables and registers them (once in
   a deployment's life). On the production profile once more with
   DAGSTER_EVENT_BATCH_SIZE=0 (Dagster stores a run's events one at a time), on days of
   their own in the same table, before the stack's own setting (1000) is measured. Then
   the range's floor under one commit per partition: `--days` commits alone, as the
   range makes them (a replaceWhere of a day with its app transaction), on the
   profile's lakehouse; no range can cost less than a one-day run and those.
2. The warehouse publish (`benchmarks/user_events.py`'s MERGE of a batch into
   user_events, pinned by the record-level index), on a table of 732 days of 1,000
   events: a 1,000-event batch whose older versions are in its own day, and one whose
   older versions are spread over the 365 days before it (median of five each).
3. Telemetry (`benchmarks/telemetry.py`): a tool's 40 report files of 25,000 rows
   ingested, then late files at 10% of its history and appends of the same size (median
   of three), each a run process of the profile. Its compute is the profile's own
   (`auto`: embedded, as runs attach to a long-lived Spark on both), and on the
   production profile the Spark path too, on the cluster's executors.
4. The visits sensor's tick finding 100 new files among 1,000 and among 10,000 known
   ones, in the profile's landing zone: a local folder, or a bucket of the stack's
   s3proxy (which sends no notifications: a tick lists the folder whole).
5. `make demo`'s total time (`python -m demo`) on a fresh deployment: every check must
   say yes and every checksum must equal the other profile's. The production profile's
   demo gets a stack of its own (the range runs' tables would change its checksums).

Run: `.venv/bin/python benchmarks/profiles.py [--days 364] [--skip-demo]` (about 25
minutes on 2 cores). Every server is stopped by its pid on the way out.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(PROJECT_ROOT), str(PROJECT_ROOT / "tests")]

import boto3  # noqa: E402
import dagster as dg  # noqa: E402
import run_cost  # noqa: E402  (benchmarks/, this script's folder)
import sensor_ticks  # noqa: E402
import servers  # noqa: E402  (tests/: the stack, brought up and down by pid)
import telemetry  # noqa: E402
import user_events  # noqa: E402
from deployments import CHECKSUM  # noqa: E402
from pyarrow import fs as pafs  # noqa: E402

from demo.__main__ import load_definitions  # noqa: E402
from resources import LandingZone  # noqa: E402
from resources.object_store import storage_from_environment  # noqa: E402
from resources.spark_server import long_lived_spark  # noqa: E402
from sensors import visits_late_files  # noqa: E402

DEMO_INTERVAL = "5"
"""The stack's sensor interval while the demo waits on its sensors."""
PUBLISH = user_events.Shape(per_day=1_000, batch=1_000)
PUBLISH_DAYS = 2 * (user_events.SPREAD_DAYS + 1)
TELEMETRY_FILES = 40
TICK_KNOWN, TICK_NEW = (1_000, 10_000), 100


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


def lander(env: dict[str, str]) -> Callable[[Path, list[str]], None]:
    """`telemetry.on_deployment`'s `land`: files written under a local folder, put into
    the profile's landing zone (LANDING_ROOT, a folder or `s3://bucket/prefix`)."""
    root = env["LANDING_ROOT"]
    store = storage_from_environment(env, deferred=False).filesystem() if "://" in root else None

    def land(staging: Path, paths: list[str]) -> None:
        for path in paths:
            if store is None:
                (Path(root) / path).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(staging / path, Path(root) / path)
            else:
                pafs.copy_files(
                    str(staging / path),
                    f"{root.removeprefix('s3://')}/{path}",
                    source_filesystem=pafs.LocalFileSystem(),
                    destination_filesystem=store,
                )

    return land


def floor(profile: str, env: dict[str, str], one_day: float, days: int) -> None:
    """The least a range can cost under one commit per partition: a one-day run's costs
    and the range's commits, with no reading and no Dagster event at all."""
    seconds = in_process(env, "commits", "--days", str(days))["seconds"]
    print(
        f"  {profile:<20} {'its ' + str(days) + ' commits alone':<34} {seconds:6.1f} s "
        f"({seconds / days * 1000:.1f} ms each): a range >= one day + them = "
        f"{(one_day + seconds) / one_day:.2f} one-day runs",
        flush=True,
    )


def in_process(env: dict[str, str], part: str, *arguments: str) -> dict:
    """`part` of this script in a process of its own with the profile's environment `env`:
    what it printed last (JSON)."""
    command = [sys.executable, __file__, "--part", part, *arguments]
    done = subprocess.run(command, env=env, cwd=PROJECT_ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{part} failed:\n{done.stdout}{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def publish() -> dict:
    """The warehouse publish's figures, on the lakehouse of this process's environment."""
    with dg.build_resources(load_definitions().resources) as built:
        rows = PUBLISH_DAYS * PUBLISH.per_day
        _, (own_day, spread, _) = user_events.publish_costs(
            built.lakehouse, rows, PUBLISH, spread=True
        )
    return {"own_day": own_day.seconds, "spread": spread.seconds, "days_read": spread.days}


def commits(days: int) -> dict:
    """What a range run's commits alone cost on this process's lakehouse: `days`
    replaceWhere commits of a 3-row day, each with its app transaction, into a table of
    their own, as a range run makes them (one commit and Delta version per partition)."""
    import pyarrow as pa

    from resources.lakehouse.port import AppTransaction
    from resources.lakehouse.predicates import eq

    def commit(lakehouse, day: dt.date) -> None:
        lakehouse.overwrite(
            "bench_range_commits",
            pa.table({"event_date": [day] * 3, "visit": [1, 2, 3]}),
            where=eq("event_date", day),
            partition_by=["event_date"],
            metadata={"day": day.isoformat()},
            app_transaction=AppTransaction(f"bench_range_commits/{day.isoformat()}", 1),
        )

    with dg.build_resources(load_definitions().resources) as built:
        commit(built.lakehouse, run_cost.FIRST_DAY)  # the table's creation: not a range's
        started = time.monotonic()
        for n in range(1, days + 1):
            commit(built.lakehouse, run_cost.FIRST_DAY + dt.timedelta(days=n))
        return {"seconds": time.monotonic() - started}


def telemetry_variants(env: dict[str, str]) -> list[tuple[str, dict[str, str]]]:
    """The profile's own telemetry compute (`auto`: embedded where runs attach to a
    long-lived Spark), and on an object store the Spark path too (TELEMETRY_COMPUTE=spark:
    the rows on the cluster's executors), each in a folder of its own."""
    variants = [("telemetry", env)]
    if env["LAKEHOUSE_ROOT"].startswith("s3://"):
        spark_path = {
            "TELEMETRY_COMPUTE": "spark",
            "LAKEHOUSE_ROOT": f"{env['LAKEHOUSE_ROOT']}/spark-path",
            "LANDING_ROOT": f"{env['LANDING_ROOT']}/spark-path",
        }
        variants.append(("telemetry-spark-path", env | spark_path))
    return variants


def other_figures(
    profile: str,
    env: dict[str, str],
    work: Path,
    bucket: Callable[[int], Callable[[Path, list[str]], LandingZone]] | None = None,
) -> None:
    """Parts 2 to 4 on the profile `env`, printed as measured; with `bucket`, the ticks'
    files are in the bucket it makes for a number of known files."""
    cost = in_process(env, "publish")
    print(
        f"  {profile:<20} warehouse publish, own day {cost['own_day'] * 1000:5.0f} ms, spread "
        f"over {cost['days_read'] - 1} days {cost['spread'] * 1000:5.0f} ms "
        f"({cost['spread'] / cost['own_day']:.2f}x)",
        flush=True,
    )
    for variant, compute in telemetry_variants(env):
        steps = telemetry.on_deployment(compute, work / variant, lander(compute), TELEMETRY_FILES)
        first, late, append = (steps[name]["seconds"] for name in ("first", "late_10", "append"))
        print(
            f"  {profile:<20} telemetry "
            f"({'Spark path' if steps['append']['on_spark'] else 'embedded'}), first "
            f"{first:5.1f} s, late file {late:5.2f} s, append {append:5.2f} s: late / append "
            f"{late / append:.2f}",
            flush=True,
        )
    small, large = (
        sensor_ticks.tick_cost(
            visits_late_files,
            sensor_ticks.visit_file,
            known,
            TICK_NEW,
            None,
            bucket(known) if bucket else None,
        )[0]
        for known in TICK_KNOWN
    )
    print(
        f"  {profile:<20} visits sensor tick, {TICK_NEW} new among {TICK_KNOWN[0]:,}: "
        f"{small:5.2f} s, among {TICK_KNOWN[1]:,}: {large:5.2f} s ({large / small:.2f}x)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=364)
    parser.add_argument("--skip-demo", action="store_true")
    parser.add_argument("--part", choices=("publish", "commits"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.part:
        print(json.dumps(commits(args.days) if args.part == "commits" else publish()))
        return
    scratch = Path(tempfile.mkdtemp(prefix="bench-profiles-"))
    scratch.chmod(0o755)  # Postgres runs as `nobody` under root
    try:
        measure(args, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def measure(args: argparse.Namespace, scratch: Path) -> None:
    """Both profiles' figures, each deployment's folders in `scratch`."""
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
        floor("embedded default", embedded, one_day, args.days)
        other_figures("embedded default", embedded, scratch / "embedded-figures")

    with servers.production_stack() as stack:
        env = {k: v for k, v in os.environ.items() if k not in run_cost.SPARK_VARIABLES}
        env |= stack | {"LANDING_ROOT": "s3://landing/bench"}
        upload(landing, env, "landing/bench")
        run_cost.materialize(env, "--partition", untimed)
        for batch, days, key in (("0", second_range, spare_again), ("1000", first_range, spare)):
            one_day, ranged = day_and_range(env | {"DAGSTER_EVENT_BATCH_SIZE": batch}, days, key)
            what = f"(DAGSTER_EVENT_BATCH_SIZE={batch})"
            say("production profile", what, one_day, ranged, args.days)
        floor("production profile", env, one_day, args.days)
        client = boto3.client(
            "s3",
            endpoint_url=env["AWS_ENDPOINT_URL"],
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
            region_name=env["AWS_REGION"],
        )
        storage = storage_from_environment(env, deferred=False)
        other_figures(
            "production profile",
            env,
            scratch / "stack-figures",
            lambda known: sensor_ticks.into_bucket(client, storage, f"ticks-{known}"),
        )

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
