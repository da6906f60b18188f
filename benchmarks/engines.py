"""delta-rs vs delta-spark on the port's operations, side by side in one run.

Both engines get identical tables (built with delta-rs: set-up is not measured) and the
same inputs, held in the process as Arrow (how the port's callers hand small data over;
Spark then writes it in one task). Rounds interleave the engines, so machine load hits
them alike; each figure is a median, and the ratio column is the result. delta-spark's
session is started (and its code paths warmed) before timing.

- replace a week: a 50k-row weekly table overwritten whole;
- replaceWhere a day: 10k rows of one day in a 30-day table partitioned by day;
- MERGE 10k into 10M: half updates, half inserts, one month's partition (pruned);
- restore: the weekly table back to the version before its last replace;
- history read: the daily table's commits with their metadata (both engines read the log
  with delta-rs: the figure shows no Spark job runs for it).

Run: `.venv/bin/python benchmarks/engines.py` (or `make bench`); about 10 minutes.
"""

from __future__ import annotations

import datetime as dt
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.merge_pruning import (  # noqa: E402
    CLAUSES,
    KEY_MATCH,
    batch_for,
    devices,
)
from benchmarks.overwriting import visits  # noqa: E402
from resources import Lakehouse, SparkResource  # noqa: E402
from resources.lakehouse.predicates import eq  # noqa: E402

ENGINES = ("delta-rs", "delta-spark")
ROUNDS = 5
FIRST_DAY = dt.date(2024, 1, 1)
DAYS = 30
MERGE_DATES = 1_000  # 10k devices a date: 10M rows
META = {"benchmark": "engines"}


def build(root: Path, spark: SparkResource) -> None:
    lake = Lakehouse(root=str(root), spark=spark)
    lake.overwrite("week", visits(FIRST_DAY, 7, 50_000, 1), metadata=META)
    for d in range(DAYS):
        day = FIRST_DAY + dt.timedelta(days=d)
        lake.overwrite(
            "daily",
            visits(day, 1, 10_000, d),
            where=eq("event_date", day),
            partition_by=["event_date"],
            metadata=META,
        )
    lake.overwrite("devices", devices(MERGE_DATES), partition_by=["change_month"], metadata=META)


def operations(lake: Lakehouse, r: int) -> dict[str, Callable[[], object]]:
    day = FIRST_DAY + dt.timedelta(days=DAYS // 2)
    batch = batch_for(MERGE_DATES // 2 + 3 * r, r)
    month = batch.column("change_month")[0].as_py()
    return {
        "replace a week (50k rows)": lambda: lake.overwrite(
            "week", visits(FIRST_DAY, 7, 50_000, 100 + r), metadata=META
        ),
        "replaceWhere a day (10k of 300k)": lambda: lake.overwrite(
            "daily", visits(day, 1, 10_000, 200 + r), where=eq("event_date", day), metadata=META
        ),
        "MERGE 10k into 10M": lambda: lake.merge(
            "devices",
            batch,
            on=eq("t.change_month", month) & KEY_MATCH,
            clauses=CLAUSES,
            metadata=META,
        ),
        "restore a version": lambda: lake.restore("week", lake.version("week") - 1, metadata=META),
        "history read (40 commits)": lambda: lake.history("daily"),
    }


def main() -> int:
    spark = SparkResource()
    with tempfile.TemporaryDirectory(prefix="bench-engines-") as tmp:
        lakes = {}
        for engine in ENGINES:
            started = time.perf_counter()
            build(Path(tmp) / engine, spark)
            lakes[engine] = Lakehouse(root=str(Path(tmp) / engine), engine=engine, spark=spark)
            print(f"built the {engine} tables in {time.perf_counter() - started:.0f} s")
        # Warm-up round, not timed: Spark's session, Delta's classes, the first plans.
        for lake in lakes.values():
            for action in operations(lake, ROUNDS).values():
                action()
        timings: dict[tuple[str, str], list[float]] = {}
        for r in range(ROUNDS):
            for engine, lake in lakes.items():
                for name, action in operations(lake, r).items():
                    started = time.perf_counter()
                    action()
                    timings.setdefault((name, engine), []).append(time.perf_counter() - started)
    median = {key: statistics.median(values) for key, values in timings.items()}
    names = list(dict.fromkeys(name for name, _ in median))
    print(f"\nmedian of {ROUNDS} rounds, local[*] on this machine")
    print(f"  {'operation':<34} {'delta-rs ms':>12} {'delta-spark ms':>15} {'spark / rs':>11}")
    for name in names:
        rs, spark_ms = median[(name, "delta-rs")], median[(name, "delta-spark")]
        print(f"  {name:<34} {rs * 1000:>12.0f} {spark_ms * 1000:>15.0f} {spark_ms / rs:>10.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
