"""The load manifest at 1,000 run directories, measured in one run:

1. Registration: the `enriched_run_directories` sensor's tick over 1,000 finished run
   directories, first when all are new (it registers them), then when all are known (the
   steady state: it lists folder names and finds nothing to do). Bound: the known tick
   under 1 s.
2. End to end: the 1,000 runs shredded and loaded as a backfill runs them (both assets'
   single-run backfill policy: one Spark session, one commit per event type and step, one
   manifest move per step); every run LOADED and every event in the warehouse, checked.
3. The `stuck_enriched_runs` tick over a manifest of 1,000 rows.
4. One more run shredded and loaded after the 1,000, against the first run of a fresh
   lakehouse: what a run costs follows the run, not the manifest's history.

Run: `.venv/bin/python benchmarks/manifest.py [--engine delta-spark] [--runs N]`
(or `make bench`).
"""

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import dagster as dg  # noqa: E402
from ticks import evaluate_tick  # noqa: E402

from assets.warehouse import ManifestSettings  # noqa: E402
from assets.warehouse.manifest import load_manifest as manifest  # noqa: E402
from assets.warehouse.manifest.enriched import SUCCESS, run_folder  # noqa: E402
from assets.warehouse.manifest.loader import DEFAULT_EVENT_TABLES, load, warehouse_table  # noqa: E402
from assets.warehouse.manifest.shredder import shred  # noqa: E402
from resources import Lakehouse, LandingZone, SparkResource  # noqa: E402
from sensors.enriched_runs import enriched_run_directories, stuck_enriched_runs  # noqa: E402

RUNS = 1_000
EVENTS_PER_RUN = 12
TICK_BOUND = 1.0
GROWTH_BOUND = 2.0
META = {"benchmark": "manifest"}
FIRST_RUN = dt.datetime(2024, 1, 1)


def run_id(number: int) -> str:
    return (FIRST_RUN + dt.timedelta(minutes=10 * number)).strftime("%Y-%m-%d-%H-%M-%S")


def write_run(landing: LandingZone, run: str) -> None:
    folder = Path(landing.root) / run_folder(run)
    folder.mkdir(parents=True)
    events = []
    for i in range(EVENTS_PER_RUN):
        common = {
            "event_id": f"{run}-{i}",
            "user_id": f"u{i % 7}",
            "event_timestamp": "2024-01-01T00:00:00Z",
        }
        kind = ("page_view", "link_click", "purchase")[i % 3]
        fields = {
            "page_view": {"page_url": f"/p/{i}", "referrer": None},
            "link_click": {"target_url": f"https://example.com/{i}"},
            "purchase": {"order_id": f"o{i}", "amount": "9.99", "currency": "EUR"},
        }[kind]
        events.append({"event_type": kind, **common, **fields})
    (folder / "part-00000.json").write_text("".join(json.dumps(e) + "\n" for e in events))
    (folder / SUCCESS).write_text("")


def timed(action):
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def process(spark: SparkResource, lake: Lakehouse, landing: LandingZone, runs: list[str]) -> None:
    shred(spark.session(), lake, landing, runs, by="benchmark", metadata=META)
    loaded = load(spark.session(), lake, runs, DEFAULT_EVENT_TABLES, by="benchmark", metadata=META)
    assert sorted(loaded.loaded) == sorted(runs), loaded


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", default=os.environ.get("LAKEHOUSE_ENGINE", "delta-rs"))
    parser.add_argument("--runs", type=int, default=RUNS)
    args = parser.parse_args()
    spark = SparkResource()
    spark.session()
    runs = [run_id(n) for n in range(args.runs)]
    with tempfile.TemporaryDirectory() as root, dg.instance_for_test() as instance:
        landing = LandingZone(root=f"{root}/landing")
        Path(landing.root).mkdir()
        lake = Lakehouse(root=f"{root}/lakehouse", engine=args.engine, spark=spark)
        for run in runs:
            write_run(landing, run)

        cursor = None

        def tick():
            nonlocal cursor
            resources = {"landing": landing, "lakehouse": lake}
            result = evaluate_tick(enriched_run_directories, instance, cursor, resources)
            cursor = result.cursor
            return result

        new_tick, first = timed(tick)
        assert len(first.run_requests) == args.runs
        known_tick, second = timed(tick)
        assert second.run_requests == []

        end_to_end, _ = timed(lambda: process(spark, lake, landing, runs))
        rows = manifest.read(lake)
        assert {r.state for r in rows.values()} == {manifest.LOADED} and len(rows) == args.runs
        loaded = sum(lake.count(warehouse_table(t)) for t in DEFAULT_EVENT_TABLES)
        assert loaded == args.runs * EVENTS_PER_RUN, loaded

        def recovery_tick():
            with dg.build_sensor_context(
                instance=instance,
                resources={"lakehouse": lake, "manifest_settings": ManifestSettings()},
            ) as context:
                return stuck_enriched_runs(context)

        stuck_tick, stuck = timed(recovery_tick)
        assert stuck.run_requests == []

        one_more = run_id(args.runs)
        write_run(landing, one_more)
        after_history, _ = timed(lambda: process(spark, lake, landing, [one_more]))

        fresh = Lakehouse(root=f"{root}/fresh", engine=args.engine, spark=spark)
        process(spark, fresh, landing, [runs[1]])  # warm the fresh tables' first commits
        first_run, _ = timed(lambda: process(spark, fresh, landing, [runs[2]]))

    growth = after_history / first_run
    print(f"\nload manifest at {args.runs:,} run directories ({args.engine}):")
    print(f"  sensor tick, {args.runs:,} new directories:    {new_tick * 1000:8.0f} ms")
    print(
        f"  sensor tick, {args.runs:,} known directories:  {known_tick * 1000:8.0f} ms "
        f"(bound {TICK_BOUND * 1000:.0f})"
    )
    print(
        f"  {args.runs:,} runs shredded and loaded end to end: {end_to_end:8.1f} s "
        f"({end_to_end / args.runs * 1000:.0f} ms a run, {loaded:,} events)"
    )
    print(f"  recovery tick over {args.runs:,} manifest rows:  {stuck_tick * 1000:8.0f} ms")
    print(f"  one run after {args.runs:,} loaded:             {after_history * 1000:8.0f} ms")
    print(f"  one run in a fresh lakehouse:                {first_run * 1000:8.0f} ms")
    print(f"  after history / fresh = {growth:.2f} (bound {GROWTH_BOUND})")
    passed = known_tick < TICK_BOUND and growth <= GROWTH_BOUND
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
