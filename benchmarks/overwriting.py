"""Cost ratios for the Overwriting patterns, measured side by side in one run.

1. Fast Metadata Cleaner vs DELETE + INSERT: replacing one week as history grows from 4
   to 52 weeks. The cleaner replaces that week's own table (metadata-only removal of the
   old files); the alternative deletes the week's rows from one big table and inserts the
   new ones. Pass: cleaner cost at 52 weeks / at 4 weeks <= 1.3.
2. Data Overwrite: replaceWhere of one day as the daily table grows tenfold.
   Pass: cost at 10x days / at 1x days <= 1.3.

Every figure is the median of several repetitions; timings on shared 2-core machines are
noisy, so the ratios (taken within this one run) are the result. Exits 1 if a bound fails.
The tables are built with delta-rs (set-up, not measured); the timed operations run on
`--engine` (default: LAKEHOUSE_ENGINE, else delta-rs).
Run: `make bench` (or `.venv/bin/python benchmarks/overwriting.py [--engine delta-spark]`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from assets.overwriting.fast_metadata_cleaner import replace_week  # noqa: E402
from resources import Lakehouse, SparkResource  # noqa: E402
from resources.lakehouse.predicates import eq  # noqa: E402

ROWS_PER_WEEK = 50_000
ROWS_PER_DAY = 10_000
HISTORY_WEEKS = (4, 13, 26, 52)
DAYS_SMALL, DAYS_LARGE = 30, 300
REPEATS = 7
FIRST_MONDAY = dt.date(2024, 1, 1)
META = {"benchmark": "overwriting"}


def visits(start: dt.date, days: int, rows: int, seed: int, **extra: dt.date) -> pa.Table:
    rng = np.random.default_rng(seed)
    base = np.datetime64(start.isoformat(), "us")
    offsets = np.sort(rng.integers(0, days * 86_400_000_000, rows))
    event_time = base + offsets.astype("timedelta64[us]")
    columns = {
        "visit_id": pa.array([f"{seed}-{i}" for i in range(rows)]),
        "user_id": pa.array([f"user-{u}" for u in rng.integers(0, 5_000, rows)]),
        "event_time": pa.array(event_time, pa.timestamp("us", tz="UTC")),
        "event_date": pa.array(event_time.astype("datetime64[D]"), pa.date32()),
        "page": pa.array(np.array(["/", "/search", "/cart", "/help"])[rng.integers(0, 4, rows)]),
        "source_line": pa.array(np.arange(rows, dtype=np.int32)),
    }
    for name, value in extra.items():
        columns[name] = pa.array([value] * rows, pa.date32())
    return pa.table(columns)


def seconds(action: Callable[..., object], *args: object, **kwargs: object) -> float:
    started = time.perf_counter()
    action(*args, **kwargs)
    return time.perf_counter() - started


def delete_insert(lake: Lakehouse, monday: dt.date, data: pa.Table) -> None:
    """The naive alternative: a row-level DELETE of the week, then an INSERT."""
    lake.delete("visits_big", where=eq("week_start", monday), metadata=META)
    lake.append("visits_big", data, metadata=META)


def week(i: int) -> dt.date:
    return FIRST_MONDAY + dt.timedelta(weeks=i)


def history_of_weeks(root: Path, history: int, engine: str) -> Lakehouse:
    """`history` weekly tables, and the same weeks in one big table whose files each hold
    many weeks (as a compacted table's would)."""
    lake = Lakehouse(root=str(root / f"h{history}"), spark=SparkResource())
    weeks = [visits(week(i), 7, ROWS_PER_WEEK, i, week_start=week(i)) for i in range(history)]
    for i, data in enumerate(weeks):
        replace_week(lake, week(i), data, metadata=META)
    lake.overwrite("visits_big", pa.concat_tables(weeks), metadata=META)
    return Lakehouse(root=lake.root, engine=engine, spark=lake.spark)


def weekly_costs(root: Path, engine: str) -> dict[int, tuple[float, float]]:
    """Median (cleaner, DELETE+INSERT) seconds to replace one week, per history length.
    Rounds interleave the history lengths, so machine load hits them alike."""
    lakes = {history: history_of_weeks(root, history, engine) for history in HISTORY_WEEKS}
    timings: dict[int, tuple[list[float], list[float]]] = {h: ([], []) for h in HISTORY_WEEKS}
    for r in range(REPEATS):
        for history, lake in lakes.items():
            # A week replaced before sits alone in the file its insert appended, which
            # flatters DELETE+INSERT: each round replaces a week not replaced yet.
            target = week((r * 7) % history)
            fresh = visits(target, 7, ROWS_PER_WEEK, 10_000 + r, week_start=target)
            cleaner = seconds(replace_week, lake, target, fresh, metadata=META)
            big = seconds(delete_insert, lake, target, fresh)
            timings[history][0].append(cleaner)
            timings[history][1].append(big)
    costs = {}
    for history, (cleaner, big) in timings.items():
        costs[history] = (statistics.median(cleaner), statistics.median(big))
        print(
            f"  {history:>2} weeks of history: cleaner {costs[history][0] * 1000:7.1f} ms   "
            f"DELETE+INSERT {costs[history][1] * 1000:8.1f} ms   "
            f"ratio {costs[history][1] / costs[history][0]:5.1f}x"
        )
    return costs


def daily_table(root: Path, days: int, engine: str) -> Lakehouse:
    """A daily table grown one day per commit, as the daily asset grows it."""
    lake = Lakehouse(root=str(root / f"d{days}"), spark=SparkResource())
    for d in range(days):
        day = FIRST_MONDAY + dt.timedelta(days=d)
        lake.overwrite(
            "visits_daily",
            visits(day, 1, ROWS_PER_DAY, d),
            where=eq("event_date", day),
            partition_by=["event_date"],
            metadata=META,
        )
    return Lakehouse(root=lake.root, engine=engine, spark=lake.spark)


def daily_costs(root: Path, engine: str) -> dict[int, float]:
    lakes = {days: daily_table(root, days, engine) for days in (DAYS_SMALL, DAYS_LARGE)}
    timings: dict[int, list[float]] = {days: [] for days in lakes}
    for r in range(REPEATS):
        for days, lake in lakes.items():
            target = FIRST_MONDAY + dt.timedelta(days=days // 2)
            fresh = visits(target, 1, ROWS_PER_DAY, 50_000 + r)
            timings[days].append(
                seconds(
                    lake.overwrite,
                    "visits_daily",
                    fresh,
                    where=eq("event_date", target),
                    metadata=META,
                )
            )
    costs = {days: statistics.median(t) for days, t in timings.items()}
    for days, cost in costs.items():
        print(f"  {days:>3} days in the table: replaceWhere of one day {cost * 1000:7.1f} ms")
    return costs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", default=os.environ.get("LAKEHOUSE_ENGINE", "delta-rs"))
    engine = parser.parse_args().engine
    with tempfile.TemporaryDirectory(prefix="bench-overwriting-") as tmp:
        root = Path(tmp)
        print(
            f"Fast Metadata Cleaner vs DELETE+INSERT ({ROWS_PER_WEEK:,} rows a week, "
            f"median of {REPEATS}, {engine}):"
        )
        weekly = weekly_costs(root, engine)
        print(f"\nData Overwrite ({ROWS_PER_DAY:,} rows a day, median of {REPEATS}, {engine}):")
        daily = daily_costs(root, engine)

    flat = weekly[HISTORY_WEEKS[-1]][0] / weekly[HISTORY_WEEKS[0]][0]
    versus = weekly[HISTORY_WEEKS[-1]][1] / weekly[HISTORY_WEEKS[-1]][0]
    growth = daily[DAYS_LARGE] / daily[DAYS_SMALL]
    checks = [
        (f"cleaner cost 52 weeks / 4 weeks = {flat:.2f}", flat <= 1.3, "<= 1.3"),
        (f"DELETE+INSERT / cleaner at 52 weeks = {versus:.1f}", True, "reported"),
        (
            f"replaceWhere day cost {DAYS_LARGE} / {DAYS_SMALL} days = {growth:.2f}",
            growth <= 1.3,
            "<= 1.3",
        ),
    ]
    print("\nRatios:")
    for text, ok, bound in checks:
        print(f"  {text:<52} {bound:>9}  {'PASS' if ok else 'FAIL'}")
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
