"""When the platform first saw each visit: `visit_first_seen`, the ingestion time that
Keyed Idempotency derives session ids from (assets/database/user_sessions.py).

`visits_daily` records it as it ingests a day, before writing the day: a MERGE that only
inserts visits not seen before, so a re-delivered or re-run visit keeps its first time.
Partitioned by event date, and the MERGE is pinned to the day, so its cost follows the
day, not the history.
"""

import datetime as dt
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from resources.lakehouse import Lakehouse, WhenNotMatchedInsert
from resources.lakehouse.predicates import eq

FIRST_SEEN = "visit_first_seen"
FIRST_SEEN_SCHEMA = pa.schema(
    [
        pa.field("visit_id", pa.string()),
        pa.field("user_id", pa.string()),
        pa.field("event_date", pa.date32()),
        pa.field("first_seen_at", pa.timestamp("us", tz="UTC")),
        pa.field("dagster_run_id", pa.string()),
    ]
)


def record_first_seen(
    lakehouse: Lakehouse,
    visits: DataFrame,
    day: dt.date,
    *,
    seen_at: dt.datetime,
    run_id: str,
    metadata: Mapping[str, Any],
) -> None:
    """Record `seen_at` for the visits of `day` that were never seen before."""
    if not lakehouse.exists(FIRST_SEEN):
        lakehouse.append(
            FIRST_SEEN,
            FIRST_SEEN_SCHEMA.empty_table(),
            partition_by=["event_date"],
            metadata=metadata,
        )
    source = visits.select(
        "visit_id",
        "user_id",
        "event_date",
        F.lit(seen_at).cast("timestamp").alias("first_seen_at"),
        F.lit(run_id).alias("dagster_run_id"),
    )
    lakehouse.merge(
        FIRST_SEEN,
        source,
        on=f"{eq('t.event_date', day).render(lakehouse.dialect)} AND t.visit_id = s.visit_id",
        clauses=[WhenNotMatchedInsert()],
        metadata=metadata,
    )
