"""MERGE cost with and without partition pruning, as the target grows tenfold.

A 10k-row change batch (half updates, half inserts) for one date is merged into
`devices`-shaped tables of 1M and 10M rows (10k changes a day), partitioned by a date
column, once with the partition bound in the MERGE condition (the engine reads one
partition) and once without (it scans the whole table). Rounds interleave the tables so
machine load hits them alike; each figure is a median. Pass: pruned time 10M / 1M <= 1.5.

Layouts: `monthly` partitions by `change_month` (the month's first day; ~300k rows a
partition, Delta's advice of few, large partitions). `daily` partitions by `change_date`
(10k rows, 1000 partitions at 10M): reported beside it because every file in the table
adds to the snapshot and MERGE planning cost in delta-rs even when pruning reads one.
delta-rs's streamed MERGE counts files scanned/skipped only when it prunes files before
the join, so those figures show pruning for the `daily` layout only; the times show it.
The tables are built with delta-rs (set-up, not measured); the MERGEs run on `--engine`
(default: LAKEHOUSE_ENGINE, else delta-rs). delta-spark reports the files it rewrote instead.
Run: `.venv/bin/python benchmarks/merge_pruning.py [--engine delta-spark]` (or `make bench`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from resources import Lakehouse, SparkResource  # noqa: E402
from resources.lakehouse import WhenMatchedUpdate, WhenNotMatchedInsert  # noqa: E402
from resources.lakehouse.predicates import eq, from_source, matches  # noqa: E402

ROWS_PER_DATE = 10_000
SIZES = {"1M": 100, "10M": 1_000}  # dates per table
LAYOUTS = {"monthly": "change_month", "daily": "change_date"}
BATCH = 10_000
ROUNDS = 5
FIRST_DATE = dt.date(2022, 1, 1)
META = {"benchmark": "merge_pruning"}
KEY_MATCH = matches("type", "version")
CLAUSES = [
    WhenMatchedUpdate(set=from_source(["full_name"])),
    WhenNotMatchedInsert(
        values=from_source(["type", "full_name", "version", "change_date", "change_month"])
    ),
]


def devices(dates: int, first_key: int = 0) -> pa.Table:
    """`ROWS_PER_DATE` devices per date; the version string is unique per row."""
    rows = dates * ROWS_PER_DATE
    keys = np.arange(first_key, first_key + rows)
    days = np.datetime64(FIRST_DATE.isoformat(), "D") + (keys // ROWS_PER_DATE)
    return pa.table(
        {
            "type": pa.array(np.array(["phone", "tablet", "watch", "laptop"])[keys % 4]),
            "full_name": pa.array(np.char.add("device ", (keys % 997).astype(str))),
            "version": pa.array(keys.astype(str)),
            "change_date": pa.array(days, pa.date32()),
            "change_month": pa.array(
                days.astype("datetime64[M]").astype("datetime64[D]"), pa.date32()
            ),
        }
    )


def batch_for(date_index: int, seed: int) -> pa.Table:
    """Half of one date's devices renamed, plus as many new devices on that date."""
    existing = devices(1, date_index * ROWS_PER_DATE).slice(0, BATCH // 2)
    renamed = existing.set_column(1, "full_name", pa.array([f"renamed {seed}"] * existing.num_rows))
    new = devices(1, 10**9 + seed * BATCH).slice(0, BATCH // 2)
    new = new.set_column(3, "change_date", existing.column("change_date"))
    new = new.set_column(4, "change_month", existing.column("change_month"))
    return pa.concat_tables([renamed, new])


def merge(lake: Lakehouse, batch: pa.Table, *, bound: str | None) -> tuple[float, str]:
    """Seconds for the MERGE, and the target files it scanned / skipped (delta-rs) or
    rewrote (delta-spark); `bound` is the partition column
    the condition pins to the batch's value (None: no pruning)."""
    condition = KEY_MATCH
    if bound:
        condition = eq(f"t.{bound}", batch.column(bound)[0].as_py()) & KEY_MATCH
    started = time.perf_counter()
    result = lake.merge("devices", batch, on=condition, clauses=CLAUSES, metadata=META)
    elapsed = time.perf_counter() - started
    metrics = result.engine_metrics
    if lake.engine == "delta-spark":
        # Spark's MERGE reports the files it rewrote, not those it scanned or skipped.
        return elapsed, f"rewritten {metrics.get('numTargetFilesRemoved', '?')}"
    files = (
        f"scanned {metrics.get('num_target_files_scanned', '?')} / "
        f"skipped {metrics.get('num_target_files_skipped_during_scan', '?')}"
    )
    return elapsed, files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", default=os.environ.get("LAKEHOUSE_ENGINE", "delta-rs"))
    engine = parser.parse_args().engine
    cases = [("monthly", True), ("monthly", False), ("daily", True)]
    with tempfile.TemporaryDirectory(prefix="bench-merge-") as tmp:
        lakes = {}
        for layout, column in LAYOUTS.items():
            for size, dates in SIZES.items():
                started = time.perf_counter()
                lake = Lakehouse(root=str(Path(tmp) / f"{layout}-{size}"), spark=SparkResource())
                lake.overwrite("devices", devices(dates), partition_by=[column], metadata=META)
                # A table grown by daily commits carries checkpoints; so does this one.
                DeltaTable(lake.uri("devices")).create_checkpoint()
                lakes[(layout, size)] = Lakehouse(root=lake.root, engine=engine, spark=lake.spark)
                print(
                    f"built {size}-row table, {layout} partitions, in "
                    f"{time.perf_counter() - started:.1f} s"
                )
        timings = {(c, size): [] for c in cases for size in SIZES}
        scanned = {}
        for r in range(ROUNDS):
            for (layout, pruned), size in timings:
                # Each MERGE changes another day, never one an earlier round changed.
                date_index = SIZES[size] // 2 + 3 * r + cases.index((layout, pruned))
                bound = LAYOUTS[layout] if pruned else None
                seconds, files = merge(lakes[(layout, size)], batch_for(date_index, r), bound=bound)
                timings[((layout, pruned), size)].append(seconds)
                scanned[((layout, pruned), size)] = files
        print(f"\nMERGE of a {BATCH:,}-row batch (median of {ROUNDS}, {engine}):")
        median = {key: statistics.median(values) for key, values in timings.items()}
        for ((layout, pruned), size), seconds in median.items():
            label = f"{layout}, {'pruned' if pruned else 'unpruned'}"
            print(
                f"  {size:>3} rows, {label:<17}: {seconds * 1000:7.0f} ms, "
                f"target files {scanned[((layout, pruned), size)]}"
            )

    def ratio(case):
        return median[(case, "10M")] / median[(case, "1M")]

    ok = ratio(("monthly", True)) <= 1.5
    print("\nRatios (time at 10M rows / at 1M rows):")
    print(
        f"  pruned MERGE, monthly partitions   = {ratio(('monthly', True)):5.2f}   <= 1.5  "
        f"{'PASS' if ok else 'FAIL'}"
    )
    print(f"  unpruned MERGE, monthly partitions = {ratio(('monthly', False)):5.2f}   reported")
    print(f"  pruned MERGE, daily partitions     = {ratio(('daily', True)):5.2f}   reported")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
