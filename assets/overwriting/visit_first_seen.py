"""When the platform first saw each visit: `visit_first_seen`, the ingestion time that
Keyed Idempotency derives session ids from (assets/database/user_sessions/).

`visits_daily` records it as it ingests a day, before writing the day: a MERGE that only
inserts visits not seen before, so a re-delivered or re-run visit keeps its first time.
Partitioned by event date, and the MERGE is pinned to the day, so its cost follows the
day, not the history.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from resources.lakehouse import Lakehouse, WhenNotMatchedInsert
from resources.lakehouse.frames import with_constants
from resources.lakehouse.predicates import is_in, matches

if TYPE_CHECKING:
    from resources.lakehouse.port import Data

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
    visits: Data,
    days: Sequence[dt.date],
    *,
    seen_at: dt.datetime,
    run_id: str,
    metadata: Mapping[str, Any],
) -> None:
    """Record `seen_at` for the visits of `days` (Arrow or a DataFrame) that were never
    seen before: one MERGE for a whole range, pinned to its days."""
    lakehouse.create(FIRST_SEEN, FIRST_SEEN_SCHEMA, partition_by=["event_date"], metadata=metadata)
    lakehouse.merge(
        FIRST_SEEN,
        _first_seen_rows(visits, seen_at=seen_at, run_id=run_id),
        on=is_in("t.event_date", days) & matches("visit_id"),
        clauses=[WhenNotMatchedInsert()],
        metadata=metadata,
    )


def _first_seen_rows(visits: Data, *, seen_at: dt.datetime, run_id: str) -> Data:
    rows = visits.select(["visit_id", "user_id", "event_date"])
    return with_constants(
        rows,
        {
            "first_seen_at": (seen_at, FIRST_SEEN_SCHEMA.field("first_seen_at").type),
            "dagster_run_id": (run_id, pa.string()),
        },
    )
