"""What verifying replays costs: a 100k-row `payments` batch, half of it replays of stored
payments spread over the whole table, into 1M- and 10M-row tables, with delta-spark (the
engine for tables this size; delta-rs would bring the keys into the run process).

- validated: `check_batch` (stored key and digest of the batch's keys, compared) and an
  append of the new half carrying the writer's app transaction: what the asset does;
- plain: insert-if-absent as one MERGE (`WHEN NOT MATCHED INSERT`) that checks nothing.

Both start from the same table version (restored between rounds, not timed); rounds
alternate the two, each figure is a median. Files and columns read come from the Spark
UI's REST API (the Parquet scans' metrics and read schemas), bytes from those columns'
chunks in the Parquet footers; the table is 100 date partitions of two files each.
Bound: validated / plain at most 1.3 at 10M rows.

Run: `.venv/bin/python benchmarks/payments.py` (about 10 minutes).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow.parquet as pq  # noqa: E402
from deltalake import DeltaTable  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from assets.database.payments import (  # noqa: E402
    PAYMENTS,
    PAYMENTS_SCHEMA,
    WRITER_APP_ID,
    check_batch,
)
from assets.database.payments_source import (  # noqa: E402
    AMOUNT_TYPE,
    DIGEST,
    KEY,
    PAYLOAD_COLUMNS,
    payload_digest,
)
from resources import Lakehouse, SparkResource  # noqa: E402
from resources.lakehouse import AppTransaction, WhenNotMatchedInsert  # noqa: E402
from resources.lakehouse.predicates import matches  # noqa: E402

SIZES = (1_000_000, 10_000_000)
BATCH = 100_000
DAYS = 100
ROUNDS = 3
BOUND = 1.3
META = {"benchmark": "payments"}
FIRST_DAY = dt.date(2024, 1, 1)
CURRENCIES = ("EUR", "USD", "GBP")


def generated(ids: DataFrame) -> DataFrame:
    """Payments as the table stores them, a deterministic function of `id`; keys look
    random, so no file's key range can be skipped."""
    return ids.select(
        F.concat(F.lit("pay-"), F.substring(F.sha2(F.col("id").cast("string"), 256), 1, 24)).alias(
            KEY
        ),
        F.concat(F.lit("acc-"), (F.col("id") % 50_000).cast("string")).alias("account_id"),
        ((F.col("id") % 100_000) / 100).cast(AMOUNT_TYPE).alias("amount"),
        F.element_at(F.array(*map(F.lit, CURRENCIES)), (F.col("id") % 3 + 1).cast("int")).alias(
            "currency"
        ),
        F.timestamp_seconds(F.lit(1_704_067_200) + F.col("id")).alias("created_at"),
        F.date_add(F.lit(FIRST_DAY), (F.col("id") % DAYS).cast("int")).alias("payment_date"),
        F.lit("payments/date=2024-01-01/generated.jsonl").alias("source_file"),
        (F.col("id") + 1).cast("int").alias("source_line"),
    ).withColumn(DIGEST, payload_digest())


def stored_rows(frame: DataFrame) -> DataFrame:
    return frame.select(
        KEY,
        *PAYLOAD_COLUMNS,
        DIGEST,
        "payment_date",
        "source_file",
        "source_line",
        F.lit("benchmark").alias("dagster_run_id"),
        F.current_timestamp().alias("ingested_at"),
    )


def batch(spark: SparkSession, size: int) -> DataFrame:
    """Half replays (stored ids spread over the whole table), half new ids."""
    replays = spark.range(0, size, size // (BATCH // 2))
    new = spark.range(size, size + BATCH // 2)
    return generated(replays.union(new)).drop("payment_date").localCheckpoint()


def validated(lake: Lakehouse, rows: DataFrame) -> int:
    writer = lake.app_transaction_version(PAYMENTS, WRITER_APP_ID)
    checked = check_batch(lake, rows, PAYLOAD_COLUMNS, lake.version(PAYMENTS))
    assert checked.conflict_keys == 0 and checked.replayed == BATCH // 2, checked
    result = lake.append(
        PAYMENTS,
        stored_rows(checked.new.withColumn("payment_date", F.lit(FIRST_DAY))),
        metadata=META,
        app_transaction=AppTransaction(WRITER_APP_ID, (writer or 0) + 1),
    )
    return result.metrics["rows_inserted"]


def plain(lake: Lakehouse, rows: DataFrame) -> int:
    result = lake.merge(
        PAYMENTS,
        stored_rows(rows.withColumn("payment_date", F.lit(FIRST_DAY))),
        on=matches(KEY),
        clauses=[WhenNotMatchedInsert()],
        metadata=META,
    )
    return result.metrics["rows_inserted"]


class ReadMetrics:
    """What the Parquet scans of the SQL executions since a point read, from Spark's REST
    API: the files (the scans' "number of files read") and the columns (their
    `ReadSchema`). Bytes are the compressed column chunks of those columns in the files
    read, from the Parquet footers: what a scan of those columns fetches (random keys
    leave no row group to skip)."""

    def __init__(self, spark: SparkSession) -> None:
        context = spark.sparkContext
        self.base = f"{context.uiWebUrl}/api/v1/applications/{context.applicationId}/sql"

    def _executions(self, details: bool) -> list[dict]:
        query = f"details={str(details).lower()}&planDescription={str(details).lower()}"
        with urllib.request.urlopen(f"{self.base}?{query}&offset=0&length=100000") as response:
            return json.load(response)

    def mark(self) -> int:
        return max((e["id"] for e in self._executions(False)), default=-1)

    def read_since(self, mark: int) -> tuple[int, set[str]]:
        files, columns = 0, set()
        for execution in self._executions(True):
            if execution["id"] <= mark:
                continue
            for node in execution["nodes"]:
                if node["nodeName"].startswith("Scan parquet"):
                    metrics = {m["name"]: m["value"] for m in node.get("metrics", [])}
                    files += int(metrics.get("number of files read", "0").replace(",", ""))
            for schema in re.findall(r"ReadSchema: struct<(.*?)>\n", execution["planDescription"]):
                columns |= {field.split(":")[0] for field in schema.split(",") if field}
        return files, columns


def column_bytes(table_uri: str, version: int, columns: set[str]) -> tuple[int, int]:
    """Compressed bytes of `columns` and of every column in the table's files."""
    chosen = every = 0
    for uri in DeltaTable(table_uri, version=version).file_uris():
        metadata = pq.ParquetFile(uri).metadata
        for group in range(metadata.num_row_groups):
            for index in range(metadata.num_columns):
                chunk = metadata.row_group(group).column(index)
                every += chunk.total_compressed_size
                if chunk.path_in_schema in columns:
                    chosen += chunk.total_compressed_size
    return chosen, every


def measure(
    lake: Lakehouse,
    scans: ReadMetrics,
    insert: Callable[[Lakehouse, DataFrame], int],
    rows: DataFrame,
    base: int,
) -> tuple[float, int, set[str]]:
    marker = scans.mark()
    started = time.perf_counter()
    inserted = insert(lake, rows)
    seconds = time.perf_counter() - started
    assert inserted == BATCH // 2, inserted
    time.sleep(1)  # the UI's listener records an execution's metrics asynchronously
    files, columns = scans.read_since(marker)
    lake.restore(PAYMENTS, base, metadata=META)
    return seconds, files, columns


def main() -> int:
    resource = SparkResource(ui_enabled=True)
    spark = resource.session()
    rows_of: dict[tuple[int, str], list[tuple[float, int, set[str]]]] = {}
    read_bytes: dict[tuple[int, str], tuple[int, int]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-payments-") as tmp:
        for size in SIZES:
            lake = Lakehouse(root=str(Path(tmp) / str(size)), engine="delta-spark", spark=resource)
            started = time.perf_counter()
            lake.append(
                PAYMENTS,
                stored_rows(generated(spark.range(size))),
                metadata=META,
                partition_by=["payment_date"],
            )
            base = lake.version(PAYMENTS)
            print(f"built a {size:,}-row table in {time.perf_counter() - started:.0f} s")
            incoming = batch(spark, size)
            scans = ReadMetrics(spark)
            measure(lake, scans, validated, incoming, base)  # warm-up
            for _ in range(ROUNDS):
                for name, insert in (("validated", validated), ("plain", plain)):
                    rows_of.setdefault((size, name), []).append(
                        measure(lake, scans, insert, incoming, base)
                    )
                    columns = rows_of[(size, name)][-1][2]
                    read_bytes[(size, name)] = column_bytes(lake.uri(PAYMENTS), base, columns)
    print(f"\n{BATCH:,}-row batch, half replays; median of {ROUNDS} rounds, local[*]")
    print(
        f"  {'table rows':>11} {'insert':<10} {'seconds':>8} {'files read':>11} "
        f"{'MiB read':>9} {'of MiB':>7}  columns read"
    )
    ratios: dict[int, dict[str, float]] = {}
    for (size, name), runs in rows_of.items():
        seconds = statistics.median(r[0] for r in runs)
        # Scans of the Delta log (its checkpoint is Parquet too) are not the table's.
        files, columns = runs[-1][1], runs[-1][2] & set(PAYMENTS_SCHEMA.names)
        chosen, every = read_bytes[(size, name)]
        ratios.setdefault(size, {})[name] = seconds
        print(
            f"  {size:>11,} {name:<10} {seconds:>8.2f} {files:>11} {chosen / 2**20:>9.1f} "
            f"{every / 2**20:>7.1f}  {', '.join(sorted(columns))}"
        )
    failed = False
    for size, timing in ratios.items():
        ratio = timing["validated"] / timing["plain"]
        verdict = "ok" if ratio <= BOUND or size != SIZES[-1] else "OVER THE BOUND"
        failed |= verdict != "ok"
        print(f"  validated / plain at {size:,} rows: {ratio:.2f} (bound {BOUND} at 10M) {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
