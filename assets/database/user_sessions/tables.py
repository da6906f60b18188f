"""The tables of `user_sessions`: its own, and the two control tables it keeps beside it.
Each schema is written once, here; column lists are taken from it."""

import pyarrow as pa

USER_SESSIONS = "user_sessions"
RETIRED = "user_sessions_retired"
BUILDS = "user_sessions_builds"
"""One row per build of a day's sessions, appended after its MERGE: an append commits
without reading the table, and the latest row of a day is its mark."""

SESSIONS_SCHEMA = pa.schema(
    [
        pa.field("session_id", pa.string()),
        pa.field("user_id", pa.string()),
        pa.field("session_start", pa.timestamp("us", tz="UTC")),
        pa.field("session_end", pa.timestamp("us", tz="UTC")),
        pa.field("visits", pa.int64()),
        pa.field("first_ingested_at", pa.timestamp("us", tz="UTC")),
        pa.field("first_ingested_visit", pa.string()),
        pa.field("session_date", pa.date32()),
        pa.field("dagster_run_id", pa.string()),
        pa.field("updated_at", pa.timestamp("us", tz="UTC")),
    ]
)
SESSION_COLUMNS = tuple(SESSIONS_SCHEMA.names)
WRITE_COLUMNS = ("dagster_run_id", "updated_at")
"""Set by the write that stores a session, not computed from its visits."""
COMPUTED_COLUMNS = tuple(name for name in SESSION_COLUMNS if name not in WRITE_COLUMNS)
"""What sessionizing visits gives of a session."""
STORED_COLUMNS = ["session_id", "user_id", "session_start", "session_end", "session_date"]
"""What a rebuild reads of the stored sessions."""

RETIRED_SCHEMA = pa.schema(
    [
        pa.field("session_id", pa.string()),
        pa.field("user_id", pa.string()),
        pa.field("merged_into", pa.string()),
        pa.field("retired_at", pa.timestamp("us", tz="UTC")),
        pa.field("dagster_run_id", pa.string()),
        pa.field("partition_key", pa.string()),
    ]
)
BUILDS_SCHEMA = pa.schema(
    [
        pa.field("session_day", pa.date32()),
        pa.field("day_visits", pa.int64()),
        pa.field("seen_through", pa.int64()),
        pa.field("built_at", pa.timestamp("us", tz="UTC")),
        pa.field("dagster_run_id", pa.string()),
    ]
)
