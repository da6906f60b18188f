"""What users wait for, measured side by side in one run:

0. Loading the definitions in a fresh interpreter, as every run process does first, and
   which heavy libraries that load imports.
1. A one-day `dagster asset materialize` of visits_daily that boots its own local Spark,
   against one attached to the long-lived Spark (Spark Connect) `make dev` starts, once
   that one is warm and the tables are in its catalog (after one run): the median of
   `--repeats` of each.
2. `--days` small days (3 visits each) of visits_daily in one range run, against a
   one-day run of the same kind (both attached; the median of `--repeats` range runs,
   each on a deployment of its own); the one-day and range runs once more on a Dagster
   instance in Postgres (as the production profile's), without and with
   DAGSTER_EVENT_BATCH_SIZE=1000; the same for payments (3 payments a
   day), and for user_sessions over those visits (its last day alone, then the others in
   one range run).
3. The latency from a visits file landing to its day committed, under the daemon of
   `make dev` (platform/dev.py) with the file sensors ticking every `--interval` seconds.
4. `make demo`'s total wall time on a fresh instance (`python -m demo`), which starts its
   own long-lived Spark and `dagster dev`.

Every part works in a scratch folder of its own (lakehouse, landing zone, Dagster home);
the runs go through the real CLI, as a user's do.

Run: `.venv/bin/python benchmarks/run_cost.py [--days 364] [--interval 30] [--landings 3]
[--repeats 3] [--skip-demo]`.
"""

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

import dagster as dg  # noqa: E402

from demo.dagster_dev import Dagster, free_port, serves, wait_for_daemon  # noqa: E402
from demo.servers import create_databases, postgres  # noqa: E402
from resources import Lakehouse, SparkResource  # noqa: E402
from resources.spark_server import long_lived_spark  # noqa: E402

DEFINITIONS = PROJECT_ROOT / "platform" / "definitions.py"
FIRST_DAY = dt.date(2025, 1, 6)
SPARK_VARIABLES = ("SPARK_REMOTE", "SPARK_SERVER_STATE", "SPARK_MASTER")


def write_jsonl(landing: Path, source: str, day: dt.date, name: str, rows: list[dict]) -> None:
    """`rows` as the file `<source>/date=<day>/<name>` of the landing zone."""
    folder = landing / source / f"date={day.isoformat()}"
    folder.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(row) + "\n" for row in rows)
    (folder / name).write_text(lines, encoding="utf-8")


def write_day(landing: Path, day: dt.date, visits: int, *, tag: str = "part") -> None:
    rows = [
        {
            "visit_id": f"{tag}-{day:%Y%m%d}-{i}",
            "user_id": f"user-{i % 7}",
            "event_time": f"{day.isoformat()}T{10 + i:02d}:00:00Z",
            "page": "/home",
        }
        for i in range(visits)
    ]
    write_jsonl(landing, "visits", day, f"{tag}.jsonl", rows)


def write_payments(landing: Path, day: dt.date, payments: int) -> None:
    rows = [
        {
            "idempotency_key": f"pay-{day:%Y%m%d}-{i}",
            "account_id": f"acc-{i % 7}",
            "amount": f"{10 + i}.50",
            "currency": "EUR",
            "created_at": f"{day.isoformat()}T{10 + i:02d}:00:00+00:00",
        }
        for i in range(payments)
    ]
    write_jsonl(landing, "payments", day, "batch.jsonl", rows)


def write_instance(home: Path, env: dict[str, str]) -> None:
    """The instance configuration `make setup` writes, in `home` (on Postgres when `env`
    names DAGSTER_POSTGRES_URL)."""
    subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "platform" / "instance.py"), str(home)],
        check=True,
        capture_output=True,
        env={**os.environ, **env},
    )


def deployment(
    work: Path, landing: Path, spark: dict[str, str], instance: dict[str, str] | None = None
) -> dict[str, str]:
    """The environment of a fresh lakehouse and Dagster home in `work` reading `landing`,
    with the Spark variables `spark` (none: a local Spark in each run) and the instance's
    variables `instance` (none: SQLite storage)."""
    home = work / "dagster"
    write_instance(home, instance or {})
    if not instance:
        with dg.DagsterInstance.from_config(str(home)):
            pass  # the instance's storage, created before any run
    env = {key: value for key, value in os.environ.items() if key not in SPARK_VARIABLES}
    return {
        **env,
        **spark,
        **(instance or {}),
        "DAGSTER_HOME": str(home),
        "LAKEHOUSE_ROOT": str(work / "lakehouse"),
        "LANDING_ROOT": str(landing),
    }


def materialize(env: dict[str, str], *partition: str, asset: str = "visits_daily") -> float:
    """Wall time of `dagster asset materialize` of `asset` for `partition`."""
    command = [sys.executable, "-m", "dagster", "asset", "materialize", "-f", str(DEFINITIONS)]
    started = time.monotonic()
    done = subprocess.run(
        [*command, "--select", asset, *partition],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"run {' '.join(partition)} failed:\n{done.stdout}{done.stderr}")
    return time.monotonic() - started


HEAVY_LIBRARIES = ("pandas", "pyarrow.dataset", "pyspark.sql.connect", "delta", "deltalake")


def definitions_load() -> tuple[float, list[str]]:
    """Seconds to import and load the definitions in a fresh interpreter (the median of
    three), and the heavy libraries that load imported."""
    probe = (
        "import importlib.util, json, sys, time\n"
        "started = time.perf_counter()\n"
        f"spec = importlib.util.spec_from_file_location('definitions', {str(DEFINITIONS)!r})\n"
        "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "print(json.dumps([time.perf_counter() - started,"
        f" [m for m in {HEAVY_LIBRARIES!r} if m in sys.modules]]))\n"
    )
    loads = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", probe],
                cwd=PROJECT_ROOT,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        for _ in range(3)
    ]
    seconds = sorted(load[0] for load in loads)[1]
    return seconds, loads[0][1]


def committed_days(lakehouse_root: Path) -> set[str]:
    lakehouse = Lakehouse(root=str(lakehouse_root), spark=SparkResource())
    if not lakehouse.exists("visits_daily"):
        return set()
    return {
        str(entry.metadata.get("partition_key"))
        for entry in lakehouse.history("visits_daily")
        if entry.metadata.get("transaction_app_id")
    }


def landing_latency(work: Path, spark: dict[str, str], *, interval: int, landings: int) -> list:
    """Seconds from each file landing to its day committed, under `make dev`'s daemon."""
    landing = work / "landing"
    env = {**deployment(work, landing, spark), "SENSOR_INTERVAL_SECONDS": str(interval)}
    url = f"http://127.0.0.1:{free_port()}"
    log = (work / "dagster-dev.log").open("ab")
    dev = subprocess.Popen(
        [sys.executable, str(PROJECT_ROOT / "platform" / "dev.py"), "-h", "127.0.0.1"]
        + ["-p", url.rsplit(":", 1)[1]],
        env=env,
        cwd=PROJECT_ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while not serves(url, Path(env["DAGSTER_HOME"])):
            if dev.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"make dev did not come up; see {work / 'dagster-dev.log'}")
            time.sleep(1)
        with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
            dagster = Dagster(url, instance, started=True)
            wait_for_daemon(dagster)
            # A first tick on the empty landing zone: the sensor is ticking.
            dagster.settle(["visits_late_files"], time.time(), timeout=300)
        latencies = []
        for i in range(landings):
            day = FIRST_DAY + dt.timedelta(days=i)
            landed = time.monotonic()
            write_day(landing, day, 3)
            while day.isoformat() not in committed_days(work / "lakehouse"):
                if time.monotonic() - landed > 300:
                    raise SystemExit(f"{day} was not committed in 300 s; see {url}")
                time.sleep(0.25)
            latencies.append(time.monotonic() - landed)
            # The next file lands at another point of the sensor's interval.
            time.sleep(interval / (landings + 1))
        return latencies
    finally:
        os.killpg(dev.pid, signal.SIGINT)
        try:
            dev.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(dev.pid, signal.SIGKILL)
            dev.wait()


def demo_time(work: Path) -> float:
    home = work / "dagster"
    write_instance(home, {})
    env = {key: value for key, value in os.environ.items() if key not in SPARK_VARIABLES}
    env.update(
        DAGSTER_HOME=str(home),
        LAKEHOUSE_ROOT=str(work / "lakehouse"),
        LANDING_ROOT=str(work / "landing"),
    )
    return run_demo(env, work / "demo.out")


def run_demo(env: dict[str, str], out: Path) -> float:
    """Wall time of `python -m demo` in `env`; its report is written to `out`."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-u", "-m", "demo"],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
    )
    elapsed = time.monotonic() - started
    out.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"the demo failed; its report: {out}")
    return elapsed


def _listed(seconds: list[float]) -> str:
    return ", ".join(f"{value:.1f}" for value in seconds)


def postgres_ranges(
    scratch: Path, landing: Path, spark: dict[str, str], first: str, last: str, extra: list[str]
) -> None:
    """The one-day and range runs of visits_daily again, on an instance in Postgres (the
    production profile's), without and with DAGSTER_EVENT_BATCH_SIZE."""
    scratch.chmod(0o755)  # Postgres runs as `nobody` under root
    with postgres(scratch / "postgres", free_port(), {"fsync": "off"}) as server:
        print("The same on a Dagster instance in Postgres, attached:")
        for batch in ("0", "1000"):
            database = f"dagster_batch_{batch}"
            create_databases(server, [database])
            env = deployment(
                scratch / database,
                landing,
                spark,
                {
                    "DAGSTER_POSTGRES_URL": server.rsplit("/", 1)[0] + f"/{database}",
                    "DAGSTER_EVENT_BATCH_SIZE": batch,
                },
            )
            materialize(env, "--partition", extra[-1])  # the storage's tables; registers
            one_day = materialize(env, "--partition", extra[0])
            ranged = materialize(env, "--partition-range", f"{first}...{last}")
            print(
                f"  DAGSTER_EVENT_BATCH_SIZE={batch}: one day {one_day:5.1f} s, range run "
                f"{ranged:6.1f} s   range / one day = {ranged / one_day:.2f}",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=364)
    parser.add_argument("--interval", type=int, default=30, help="sensor interval, seconds")
    parser.add_argument("--landings", type=int, default=3)
    parser.add_argument("--skip-demo", action="store_true")
    parser.add_argument(
        "--repeats", type=int, default=3, help="one-day runs of each kind, and visits range runs"
    )
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-run-cost-"))
    landing = scratch / "landing"
    # The ranges take the first `--days` days; the one-day runs and the untimed ones
    # before them take the days after those.
    every_day = [FIRST_DAY + dt.timedelta(days=i) for i in range(args.days + args.repeats + 1)]
    for day in every_day:
        write_day(landing, day, 3)
        write_payments(landing, day, 3)
    days, extra = every_day[: args.days], [day.isoformat() for day in every_day[args.days :]]
    first, last = days[0].isoformat(), days[-1].isoformat()
    # Each figure is printed as soon as it is measured.
    seconds, heavy = definitions_load()
    print(
        f"Loading the definitions (a run process's start): {seconds:.2f} s; heavy "
        f"libraries imported: {', '.join(heavy) or 'none'}",
        flush=True,
    )
    with long_lived_spark(scratch / "spark", os.environ, say=lambda line: None) as spark:
        # Each kind of one-day run `--repeats` times, each on a fresh deployment: the
        # median of each is the figure (one run swings by a second or more while the 2
        # cores are shared). The booting runs go first: a booting run's JVM is still
        # exiting when its process ends, and took up to 0.8 s from an attached run
        # started right after it, which no run under `make dev` pays.
        boots = [
            materialize(deployment(scratch / f"boot{repeat}", landing, {}), "--partition", first)
            for repeat in range(args.repeats)
        ]
        # The attached runs measure a deployment in use: a long-lived Spark that is warm,
        # and tables already in its SQL catalog. One untimed run first loads the server's
        # classes and compiles its hot paths, and registers the tables (once in a
        # deployment's life: `benchmarks/catalog.py` measures it), as the first run after
        # `make dev` starts does. The range runs later on the same deployment.
        ranged = deployment(scratch / "attached", landing, spark)
        materialize(ranged, "--partition", extra[-1])
        attaches = [
            materialize(ranged, "--partition", extra[repeat]) for repeat in range(args.repeats)
        ]
        boot, attach = statistics.median(boots), statistics.median(attaches)
        print(
            "One-day `dagster asset materialize` of visits_daily (3 visits), median of "
            f"{args.repeats}:"
        )
        print(f"  booting a local Spark:            {boot:7.1f} s   ({_listed(boots)})")
        print(
            f"  attached to the long-lived Spark: {attach:7.1f} s   ({_listed(attaches)})   "
            f"attach / boot = {attach / boot:.2f}",
            flush=True,
        )
        # The range runs `--repeats` times too, each on a deployment of its own that one
        # untimed day has registered (one range run alone swung 20 to 32 s in one hour):
        # the first on the deployment above, which user_sessions reads below.
        ranges = [materialize(ranged, "--partition-range", f"{first}...{last}")]
        for repeat in range(1, args.repeats):
            again = deployment(scratch / f"ranged{repeat}", landing, spark)
            materialize(again, "--partition", extra[-1])
            ranges.append(materialize(again, "--partition-range", f"{first}...{last}"))
        ranged_run = statistics.median(ranges)
        print(
            f"{args.days} days (3 visits each) in one range run, attached, median of "
            f"{args.repeats}:"
        )
        print(
            f"  range run:                        {ranged_run:7.1f} s   ({_listed(ranges)})   "
            f"range / one day = {ranged_run / attach:.2f}",
            flush=True,
        )
        postgres_ranges(scratch, landing, spark, first, last, extra)
        payments = deployment(scratch / "payments", landing, spark)
        materialize(payments, "--partition", extra[-1], asset="payments")  # registers
        one_day = materialize(payments, "--partition", extra[0], asset="payments")
        payments_range = materialize(
            payments, "--partition-range", f"{first}...{last}", asset="payments"
        )
        print(f"payments, {args.days} days (3 payments each), attached:")
        print(f"  one day:                          {one_day:7.1f} s")
        print(
            f"  range run:                        {payments_range:7.1f} s   range / one day = "
            f"{payments_range / one_day:.2f}",
            flush=True,
        )
        # user_sessions over the visits the range committed: its last day alone, then
        # every other day in one range run (after an untimed day that registers it).
        materialize(ranged, "--partition", extra[-1], asset="user_sessions")
        one_day = materialize(ranged, "--partition", last, asset="user_sessions")
        before_last = days[-2].isoformat()
        sessions_range = materialize(
            ranged, "--partition-range", f"{first}...{before_last}", asset="user_sessions"
        )
        print("user_sessions over those visits, attached:")
        print(f"  one day:                          {one_day:7.1f} s")
        print(
            f"  range run of {args.days - 1} days:            {sessions_range:7.1f} s   "
            f"range / one day = {sessions_range / one_day:.2f}",
            flush=True,
        )
        latency = landing_latency(
            scratch / "latency", spark, interval=args.interval, landings=args.landings
        )
        print(
            f"File landed -> its day committed, under make dev's daemon, sensor every "
            f"{args.interval} s:"
        )
        print(
            "  "
            + ", ".join(f"{seconds:.1f} s" for seconds in latency)
            + f"   (max {max(latency):.1f} s; bound {15 + args.interval} s)",
            flush=True,
        )
    if not args.skip_demo:
        print(f"make demo on a fresh instance:      {demo_time(scratch / 'demo'):7.1f} s")
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
