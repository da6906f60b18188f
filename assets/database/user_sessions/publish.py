"""Publishing a rebuild: the retired ids recorded, then one MERGE into `user_sessions`,
then the days' build marks; each step idempotent, so a retry after a crash between them
is safe."""

import datetime as dt

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from assets.database.user_sessions.rebuild import Rebuild
from assets.database.user_sessions.tables import (
    BUILDS,
    BUILDS_SCHEMA,
    COMPUTED_COLUMNS,
    RETIRED,
    RETIRED_SCHEMA,
    SESSION_COLUMNS,
    SESSIONS_SCHEMA,
    USER_SESSIONS,
)
from resources import Lakehouse
from resources.lakehouse import (
    CommitResult,
    WhenMatchedDelete,
    WhenMatchedUpdate,
    WhenNotMatchedInsert,
)
from resources.lakehouse.predicates import IsTrue, Not, between, from_source, matches


def _record_retired(
    lakehouse: Lakehouse, retired: DataFrame, *, run_id: str, partition_key: str, metadata: dict
) -> None:
    rows = retired.select(
        "session_id",
        "user_id",
        "merged_into",
        F.current_timestamp().alias("retired_at"),
        F.lit(run_id).alias("dagster_run_id"),
        F.lit(partition_key).alias("partition_key"),
    )
    lakehouse.merge(
        RETIRED,
        rows,
        on=matches("session_id"),
        clauses=[WhenNotMatchedInsert()],
        metadata=metadata,
    )


def publish(
    lakehouse: Lakehouse, rebuild: Rebuild, *, run_id: str, partition_key: str, metadata: dict
) -> tuple[CommitResult, int]:
    """Record the retired ids, then MERGE the rebuild into `user_sessions` in one commit
    (upsert changed sessions, delete retired ones); returns the commit and how many ids
    were retired. Both steps are idempotent, so a retry after a crash between them is
    safe."""
    for table, schema, partitioning in (
        (USER_SESSIONS, SESSIONS_SCHEMA, ["session_date"]),
        (RETIRED, RETIRED_SCHEMA, None),
        (BUILDS, BUILDS_SCHEMA, None),
    ):
        lakehouse.create(table, schema, partition_by=partitioning, metadata=metadata)
    retired_count = rebuild.retired.count()
    if retired_count:
        _record_retired(
            lakehouse,
            rebuild.retired,
            run_id=run_id,
            partition_key=partition_key,
            metadata=metadata,
        )
    source = rebuild.sessions.select(
        *COMPUTED_COLUMNS,
        F.lit(run_id).alias("dagster_run_id"),
        F.lit(dt.datetime.now(dt.UTC)).cast("timestamp").alias("updated_at"),
        F.lit(False).alias("_retired"),
    ).unionByName(
        rebuild.retired.select("session_id", "user_id", F.lit(True).alias("_retired")),
        allowMissingColumns=True,
    )
    low, high = rebuild.window.dates
    # Every stored session the rebuild read, and every rebuilt one, starts in the window.
    unchanged = matches("session_start", "session_end", "visits", "first_ingested_at")
    retired = IsTrue("s._retired")
    result = lakehouse.merge(
        USER_SESSIONS,
        source,
        on=between("t.session_date", low, high) & matches("session_id"),
        clauses=[
            WhenMatchedDelete(condition=retired),
            # An unchanged session is left as it is: a rerun rewrites nothing.
            WhenMatchedUpdate(condition=Not(unchanged), set=from_source(SESSION_COLUMNS)),
            WhenNotMatchedInsert(condition=Not(retired), values=from_source(SESSION_COLUMNS)),
        ],
        metadata={**metadata, "retired_sessions": retired_count},
    )
    # After the sessions: a crash in between leaves the older marks, and the retry
    # rebuilds a superset of what changed.
    built_at = dt.datetime.now(dt.UTC)
    builds = [
        {
            "session_day": mark.day,
            "day_visits": mark.visits,
            "seen_through": mark.seen_through,
            "built_at": built_at,
            "dagster_run_id": run_id,
        }
        for mark in rebuild.changes.marks
    ]
    lakehouse.append(BUILDS, pa.Table.from_pylist(builds, schema=BUILDS_SCHEMA), metadata=metadata)
    return result, retired_count
