"""What `user_events` costs as it grows, side by side in one run, on each engine
(delta-rs, then delta-spark):

1. The MERGE of a 10k-event batch (`merge_batch`, as the asset runs it: pinned to the
   batch's days and the days the record-level index names for its keys) into
   `user_events` of 1M and of 10M rows. The table grows as it does in use, by days:
   10,000 events a day, so 100 days and 1,000 days. Half the batch updates stored events
   of its day (newer versions), half is new. Figures are medians of five rounds per
   size; the files the MERGE's days hold (scanned) and the files it never opens
   (skipped) are reported from the log. Bound: 10M / 1M at most 1.5.
2. At 10M rows, the same batch whose older versions lie anywhere in the year before its
   day (5,000 stored events spread over 365 days, each moving to the batch's day): it
   reads the files of those 366 days only (asserted), printed beside the own-day batch
   and beside the same MERGE without the index, which reads every day.
3. Staging throughput: a 1M-line batch file parsed, validated, keyed (SHA-256 of the
   canonical identity for the events without `event_id`, a third of them) and
   deduplicated (a tenth of the lines are older versions), in rows per second, beside
   Spark's own `spark.read.schema(...).json(...)` of the same file counted in the same
   session. Bound: at least 0.33 of that read. Printed beside them: what Spark's
   canonical payload alone costs, the same read with the payload as a VARIANT and the
   SHA-256 of its `to_json` taken (no validation, numbering, event times or dedup): the
   most staging could reach while its payloads are canonicalized by Spark.

`user_events` is made as the asset makes it, with deletion vectors (`TABLE_PROPERTIES`):
Delta Spark's MERGE marks the rows a publish replaces and leaves their files; delta-rs's
MERGE (which cannot write vectors yet, delta-rs issue 4512) writes those files again.

Event ids are `e<n>`: short. `--hashed-ids` gives every event the SHA-256 (hex) of that
id instead, 64 characters as ids from producers often are: the same events and rounds.
The index holds a 64-bit hash of each key and its day, so its lookup costs the same
whatever the ids. Building the index from the table (printed too) reads every row's key
hash (DataFusion's SHA-256) and day.

Run: `.venv/bin/python benchmarks/user_events.py [--engine delta-rs|delta-spark]
[--hashed-ids]` (or `make bench`).
"""

import argparse
import datetime as dt
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark.sql import DataFrame  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from assets.warehouse import key_index  # noqa: E402
from assets.warehouse.events_source import batch_file, parse_batch  # noqa: E402
from assets.warehouse.staging_merge import (  # noqa: E402
    NEWER_WINS,
    TABLE_COLUMNS,
    TABLE_PROPERTIES,
    USER_EVENTS,
    OneRowPerKey,
    deduplicate,
    merge_batch,
)
from resources import Lakehouse, LandingZone, SparkResource  # noqa: E402
from resources.lakehouse.predicates import Compare, matches  # noqa: E402

SIZES = (1_000_000, 10_000_000)
ROUNDS = 5
BOUND = 1.5
STAGING_BOUND = 0.33
SPREAD_DAYS = 365
FIRST_DAY = dt.date(2020, 1, 1)
META = {"benchmark": "user_events"}
ENGINES = ("delta-rs", "delta-spark")


CHUNK = 1_000_000
"""Rows per history commit: delta-rs writes a DataFrame through the driver's memory."""


@dataclass(frozen=True)
class Shape:
    """Events a day in the table, and events a batch. A spread batch's stored events
    come from the `SPREAD_DAYS` days before the table's middle day: a table of at least
    `2 * (SPREAD_DAYS + 1)` days."""

    per_day: int = 10_000
    batch: int = 10_000


SHAPE = Shape()


def build_table(lake: Lakehouse, rows: int, shape: Shape, *, hashed_ids: bool) -> None:
    for start in range(0, rows, CHUNK):
        lake.append(
            USER_EVENTS,
            with_ids(history(lake, start, min(start + CHUNK, rows), shape), hashed=hashed_ids),
            partition_by=["event_date"],
            metadata=META,
            table_properties=TABLE_PROPERTIES,
        )


def history(lake: Lakehouse, start: int, end: int, shape: Shape):
    """Events `start` .. `end - 1` of the table, `shape.per_day` a day."""
    ids = lake.spark.session().range(start, end)
    day = F.date_add(F.lit(FIRST_DAY), (F.col("id") / shape.per_day).cast("int"))
    at = F.timestamp_seconds(F.unix_timestamp(day.cast("timestamp")) + F.col("id") % 86_400)
    return ids.select(
        F.concat(F.lit("e"), F.col("id").cast("string")).alias("event_id"),
        F.concat(F.lit("u"), (F.col("id") % 5_000).cast("string")).alias("user_id"),
        at.alias("event_timestamp"),
        at.alias("ingestion_time"),
        F.to_json(F.struct(F.col("id").alias("n"))).alias("payload"),
        F.lit(False).alias("is_deleted"),
        day.alias("event_date"),
        F.lit("history").alias("batch_id"),
        F.lit(False).alias("key_derived"),
        F.sha2(F.col("id").cast("string"), 256).alias("content_digest"),
    )


def with_ids(events: DataFrame, *, hashed: bool) -> DataFrame:
    """The events, with `hashed`: their ids replaced by the SHA-256 (hex) of each."""
    return events.withColumn("event_id", F.sha2("event_id", 256)) if hashed else events


def batch_of(lake: Lakehouse, rows: int, round_no: int, shape: Shape, *, spread: bool = False):
    """A batch of events of the table's middle day: half newer versions of stored events
    (of that day, or with `spread` of the `SPREAD_DAYS` days before it, other events
    each round), half new events."""
    spark = lake.spark.session()
    middle = rows // shape.per_day // 2
    ids = spark.range(shape.batch)
    stored = F.col("id") < shape.batch // 2
    if spread:
        stored_day = F.lit(middle) - 1 - F.col("id") % SPREAD_DAYS
        stored_no = (
            stored_day * shape.per_day
            + F.lit(round_no * 100)
            + (F.col("id") / SPREAD_DAYS).cast("int")
        )
    else:
        stored_no = F.lit(middle * shape.per_day) + F.col("id") * 2
    fresh = F.lit((2 if spread else 1) * 10**12 + round_no * shape.batch) + F.col("id")
    event_no = F.when(stored, stored_no).otherwise(fresh)
    day = F.date_add(F.lit(FIRST_DAY), F.lit(middle))
    at = F.timestamp_seconds(F.unix_timestamp(day.cast("timestamp")) + 86_399)
    return ids.select(
        F.concat(F.lit("e"), event_no.cast("string")).alias("event_id"),
        F.lit("u1").alias("user_id"),
        at.alias("event_timestamp"),
        (at + F.expr(f"INTERVAL {round_no + 1} DAYS")).alias("ingestion_time"),
        F.to_json(F.struct(F.lit(round_no).alias("round"))).alias("payload"),
        F.lit(False).alias("is_deleted"),
        day.alias("event_date"),
        F.lit(f"bench-{round_no}").alias("batch_id"),
        F.lit(False).alias("key_derived"),
        F.sha2(F.lit(str(round_no)), 256).alias("content_digest"),
    ).select(*TABLE_COLUMNS)


@dataclass(frozen=True)
class Cost:
    seconds: float
    days: int
    scanned: int
    skipped: int


def merge_rounds(
    lake: Lakehouse, rows: int, shape: Shape, *, spread: bool, hashed_ids: bool
) -> Cost:
    seconds, merged = [], None
    for round_no in range(ROUNDS):
        batch = with_ids(batch_of(lake, rows, round_no, shape, spread=spread), hashed=hashed_ids)
        batch = batch.localCheckpoint()
        batch.count()
        started = time.perf_counter()
        merged = merge_batch(lake, batch, metadata=META)
        seconds.append(time.perf_counter() - started)
        metrics = merged.result.metrics
        assert (metrics["rows_updated"], metrics["rows_inserted"]) == (shape.batch // 2,) * 2
    assert merged is not None
    return Cost(
        statistics.median(seconds), len(merged.days), merged.files_in_window, merged.files_skipped
    )


def merge_costs(
    engine: str, rows: int, *, spread: bool, hashed_ids: bool
) -> tuple[float, list[Cost]]:
    """`publish_costs` on a table of `rows` in a scratch folder."""
    with tempfile.TemporaryDirectory() as root:
        lake = Lakehouse(root=root, engine=engine, spark=SparkResource())
        return publish_costs(lake, rows, SHAPE, spread=spread, hashed_ids=hashed_ids)


def publish_costs(
    lake: Lakehouse, rows: int, shape: Shape, *, spread: bool, hashed_ids: bool = False
) -> tuple[float, list[Cost]]:
    """The seconds the index takes to build from the table (made here, of `rows`, in
    `lake`), then the costs of own-day rounds and (with `spread`) spread rounds, then
    one spread batch MERGEd without the index (every day read)."""
    build_table(lake, rows, shape, hashed_ids=hashed_ids)
    # The history was appended outside the publish: the index is built once here, as
    # the first publish after an upgrade or a restore builds it.
    started = time.perf_counter()
    key_index.described_version(lake, META, repair=OneRowPerKey(lake, META))
    indexed = time.perf_counter() - started
    costs = [merge_rounds(lake, rows, shape, spread=False, hashed_ids=hashed_ids)]
    if spread:
        costs.append(merge_rounds(lake, rows, shape, spread=True, hashed_ids=hashed_ids))
        costs.append(merge_without_index(lake, rows, shape, hashed_ids=hashed_ids))
    return indexed, costs


def merge_without_index(lake: Lakehouse, rows: int, shape: Shape, *, hashed_ids: bool) -> Cost:
    """A spread batch MERGEd by key alone, as a publish without the index must: every
    day's files are read."""
    batch = with_ids(batch_of(lake, rows, ROUNDS, shape, spread=True), hashed=hashed_ids)
    source = lake.in_write_form(batch.localCheckpoint())
    files = lake.partition_files(USER_EVENTS, where=Compare("event_date", ">=", FIRST_DAY))[0]
    started = time.perf_counter()
    result = lake.merge(
        USER_EVENTS, source, on=matches("event_id"), clauses=NEWER_WINS, metadata=META
    )
    seconds = time.perf_counter() - started
    assert result.metrics["rows_updated"] == shape.batch // 2, result.metrics
    return Cost(seconds, rows // shape.per_day, files, 0)


EVENT_SCHEMA = (
    "event_id string, event_timestamp string, ingestion_time string, user_id string, "
    "payload string, op string"
)
"""What Spark's own JSON reader is given to read the staging benchmark's file."""


@dataclass(frozen=True)
class Staging:
    """Rows a second: staging the batch (parse, validate, key, dedup); Spark's own
    schema'd JSON read of the same file, counted; and Spark's canonical payload alone."""

    staged: float
    read: float
    canonical: float


def staging_throughput(spark: SparkResource, lines: int = 1_000_000) -> Staging:
    """`Staging` of a batch of `lines`, the three measured in one session, one after the
    other."""
    with tempfile.TemporaryDirectory() as root:
        landing = LandingZone(root=root)
        path = Path(root) / batch_file("big")
        path.parent.mkdir(parents=True)
        with path.open("w") as out:
            for i in range(lines):
                event = {
                    "event_timestamp": f"2024-05-01T{i % 24:02d}:{i % 60:02d}:00+02:00",
                    "ingestion_time": "2024-05-02T00:00:00Z",
                    "user_id": f"u{i % 5000}",
                    "payload": {"page": f"/p/{i}", "n": i, "tags": ["a", "b"]},
                }
                if i % 3:
                    # A tenth of the events with ids come twice: an older version first.
                    event["event_id"] = f"e{i - 1 if i % 10 == 1 else i}"
                out.write(json.dumps(event) + "\n")
        session = spark.session()
        started = time.perf_counter()
        assert session.read.schema(EVENT_SCHEMA).json(str(path)).count() == lines
        read = lines / (time.perf_counter() - started)
        started = time.perf_counter()
        session.read.schema(EVENT_SCHEMA.replace("payload string", "payload variant")).json(
            str(path)
        ).select(F.sha2(F.to_json("payload"), 256)).write.format("noop").mode("overwrite").save()
        canonical = lines / (time.perf_counter() - started)
        started = time.perf_counter()
        parsed = parse_batch(session, landing, "big", landing.stat(batch_file("big")))
        staged = deduplicate(parsed.frame).count()
        seconds = time.perf_counter() - started
        assert parsed.lines_read == lines and staged < lines
        return Staging(lines / seconds, read, canonical)


def line(label: str, cost: Cost) -> str:
    return (
        f"  {label}: {cost.seconds * 1000:7.0f} ms, {cost.days} days, "
        f"files scanned {cost.scanned}, skipped {cost.skipped}"
    )


def merge_figures(engine: str, hashed: bool) -> bool:
    """Prints the MERGE figures of `engine`; whether its bounds hold."""
    _, (small,) = merge_costs(engine, SIZES[0], spread=False, hashed_ids=hashed)
    indexed, (large, spread, unindexed) = merge_costs(
        engine, SIZES[-1], spread=True, hashed_ids=hashed
    )
    ids = "SHA-256 ids" if hashed else "ids e<n>"
    print(
        f"\nMERGE of a {SHAPE.batch:,}-event batch into user_events "
        f"({engine}, {ids}, median of {ROUNDS}):"
    )
    print(line(f"{SIZES[0]:>11,} rows, older versions in the batch's day", small))
    print(line(f"{SIZES[-1]:>11,} rows, older versions in the batch's day", large))
    print(line(f"{SIZES[-1]:>11,} rows, older versions over {SPREAD_DAYS} days", spread))
    print(line(f"{SIZES[-1]:>11,} rows, the same without the index (one)", unindexed))
    print(
        f"  the record-level index built from {SIZES[-1]:,} rows (once, as after an upgrade "
        f"or a restore): {indexed * 1000:.0f} ms"
    )
    growth = large.seconds / small.seconds
    print(f"  10M / 1M = {growth:.2f} (bound {BOUND}) {'PASS' if growth <= BOUND else 'FAIL'}")
    # The spread batch's days: its own and the 365 its keys' rows were in, and no other.
    pinned = spread.days == SPREAD_DAYS + 1 and spread.skipped > 0
    print(
        f"  spread: {spread.days} days read, {spread.scanned} of "
        f"{spread.scanned + spread.skipped} files "
        f"({'PASS' if pinned else 'FAIL'}); {spread.seconds / large.seconds:.2f}x the own-day "
        f"batch, {spread.seconds / unindexed.seconds:.2f}x the MERGE without the index"
    )
    return growth <= BOUND and pinned


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=["delta-rs", "delta-spark"], action="append")
    parser.add_argument(
        "--hashed-ids", action="store_true", help="SHA-256 (hex) event ids instead of e<n>"
    )
    args = parser.parse_args()
    held = [merge_figures(engine, args.hashed_ids) for engine in args.engine or ENGINES]
    first, again = staging_throughput(SparkResource()), staging_throughput(SparkResource())
    share = again.staged / again.read
    print(
        f"\nstaging a 1M-line batch (parse, validate, key, dedup): {first.staged:,.0f} rows/s "
        f"the first in this Spark ({first.read:,.0f} rows/s Spark's own JSON read), "
        f"{again.staged:,.0f} rows/s the next ({again.read:,.0f}): {share:.2f} of the read "
        f"(bound {STAGING_BOUND}) {'PASS' if share >= STAGING_BOUND else 'FAIL'}"
    )
    print(
        f"  Spark's canonical payload alone (read as a VARIANT, to_json, SHA-256): "
        f"{again.canonical:,.0f} rows/s, {again.canonical / again.read:.2f} of the read; "
        f"staging is {again.staged / again.canonical:.2f} of it"
    )
    return 0 if all(held) and share >= STAGING_BOUND else 1


if __name__ == "__main__":
    sys.exit(main())
