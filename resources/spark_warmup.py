"""The long-lived Spark's first query, paid when it starts rather than by the first run.

A fresh server loads the classes of its file scans, JSON and variant parsing, window
functions and Arrow collection, and compiles their generated code, on its first query:
the first one-day run after `make dev` started took 11 to 15 s where the next took 4 s.
A query of the same shapes over a few lines of a scratch file, run once at start, takes
that cost out of the first run (8 to 9 s; the rest is the first run's tables being
created and registered). An event batch file read by the native library in Python
workers is part of it: a 50-line batch then stages in 0.8 s, against 5.3 s as the first
work of a fresh Spark. Its data is made up: it warms code paths, never any table.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from event_lines import pieces
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
    scan with JSON and VARIANT parsing, a window, Arrow collection and an aggregation;
    and an event batch file read by the native library in Python workers, kept, then
    deduplicated."""
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
        _read_events(session, Path(folder) / "events.jsonl")


def _read_events(session: SparkSession, path: Path) -> None:
    """An event file read as `assets/warehouse/native_events` reads a batch: its tasks
    run by the native library in Python workers, kept, then the newest of each event."""
    path.write_text(
        "".join(
            json.dumps(
                {
                    "event_id": f"e{i % 7}",
                    "event_timestamp": "2024-01-01T00:00:00Z",
                    "ingestion_time": f"2024-01-01T00:00:{i:02d}Z",
                    "user_id": "u",
                    "payload": {"n": i},
                }
            )
            + "\n"
            for i in range(LINES)
        )
    )
    read = pieces.read(session, pieces.tasks_of(str(path), path.stat().st_size, 4 << 20))
    newest = Window.partitionBy("event_id").orderBy(F.col("ingestion_time").desc())
    read.where(F.col("line").isNotNull()).withColumn("rank", F.row_number().over(newest)).where(
        F.col("rank") == 1
    ).count()
