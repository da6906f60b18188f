"""The long-lived Spark's first query, paid when it starts rather than by the first run.

A fresh server loads the classes of its file scans, JSON and variant parsing, window
functions and Arrow collection, and compiles their generated code, on its first query:
the first one-day run after `make dev` started took 11 to 15 s where the next took 4 s.
A query of the same shapes over a few lines of a scratch file, run once at start, takes
that cost out of the first run (8 to 9 s; the rest is the first run's tables being
created and registered). Its data is made up: it warms code paths, never any table.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F

LINES = 50


def warm_up(remote: str) -> None:
    """`warm` on the Spark Connect server `remote`; best effort: a failure costs only the
    first run's time, so it is reported on standard error and not raised."""
    from pyspark.sql import SparkSession

    try:
        session = SparkSession.builder.remote(remote).create()
        try:
            warm(session)
        finally:
            session.stop()
    except Exception as error:  # noqa: BLE001 - an optimization must never stop a start
        print(f"the long-lived Spark's warm-up query failed (harmless): {error}", file=sys.stderr)


def warm(session: SparkSession) -> None:
    """Queries of the shapes the ingestion runs use, over a few made-up lines: a text
    scan with JSON and VARIANT parsing, a window, Arrow collection and an aggregation."""
    with tempfile.TemporaryDirectory(prefix="spark-warm-up-") as folder:
        lines = Path(folder) / "warm-up.jsonl"
        lines.write_text(
            "".join(
                json.dumps({"id": str(i % 7), "at": "2024-01-01T00:00:00Z", "n": i}) + "\n"
                for i in range(LINES)
            )
        )
        record = F.from_json(
            "value",
            "id string, at string, n long, _corrupt_record string",
            {"columnNameOfCorruptRecord": "_corrupt_record"},
        )
        first = Window.partitionBy("record.id").orderBy("at")
        rows = (
            session.read.text(str(lines))
            .withColumn("source_file", F.input_file_name())
            .withColumn("record", record)
            .withColumn("variant", F.expr("try_parse_json(value)"))
            .withColumn("at", F.to_timestamp("record.at"))
            .withColumn("copy", F.row_number().over(first))
            .where(F.col("copy") == 1)
            .select("record.id", "at", F.to_date("at").alias("day"), "source_file")
        )
        rows.toArrow()
        rows.groupBy("day").count().collect()
