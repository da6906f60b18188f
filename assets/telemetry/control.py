"""The telemetry tables and control tables in Delta, and the records they hold.

Data: `telemetry_raw` (rows of every file, with source and line), `telemetry_hourly`, and
`telemetry_running_totals`: a view (`running_totals`) over `telemetry_totals_within_hour`
(each row's counts summed from the start of its hour) and `telemetry_totals_hour_start`
(per hour, the totals before it).

Control: `telemetry_file_state` (one row per file: identity, what of it
was ingested, status), `telemetry_ingest_events` (append-only log of every decision),
`telemetry_blacklist` and `telemetry_quarantine` (operator-facing). Sensors read the control
tables with delta-rs; nothing here starts Spark.
"""

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from assets.telemetry.reconcile import (
    COUNTS,
    CUMULATIVE,
    HOUR,
    ORDER,
    DirtySpan,
    floor_hour,
    pending_spans,
)
from assets.telemetry.subjects import app_id
from resources import Lakehouse
from resources.catalog import View
from resources.lakehouse import AppTransaction, WhenMatchedUpdate, WhenNotMatchedInsert
from resources.lakehouse.predicates import (
    Compare,
    IsTrue,
    Not,
    all_of,
    any_of,
    eq,
    from_source,
    is_in,
    matches,
    within,
)

RAW = "telemetry_raw"
TOTALS = "telemetry_running_totals"
"""The relation users read, with TOTALS_SCHEMA: `running_totals` joins the two tables below."""
WITHIN_HOUR = "telemetry_totals_within_hour"
HOUR_START = "telemetry_totals_hour_start"
HOURLY = "telemetry_hourly"
FILE_STATE = "telemetry_file_state"
EVENTS = "telemetry_ingest_events"
BLACKLIST = "telemetry_blacklist"
QUARANTINE = "telemetry_quarantine"

UTC_TS = pa.timestamp("us", tz="UTC")


def _schema(*columns: tuple[str, pa.DataType, bool]) -> pa.Schema:
    return pa.schema([pa.field(name, kind, nullable=nullable) for name, kind, nullable in columns])


RAW_SCHEMA = _schema(
    ("subject_key", pa.string(), False),
    ("ts", UTC_TS, False),
    ("source", pa.string(), False),
    ("line", pa.int64(), False),
    ("in_spec", pa.int64(), False),
    ("out_of_spec", pa.int64(), False),
    ("mispicks", pa.int64(), False),
)
TOTALS_SCHEMA = _schema(
    ("subject_key", pa.string(), False),
    ("ts", UTC_TS, False),
    ("source", pa.string(), False),
    ("line", pa.int64(), False),
    ("cum_in_spec", pa.int64(), False),
    ("cum_out_of_spec", pa.int64(), False),
    ("cum_mispicks", pa.int64(), False),
)
WITHIN_HOUR_SCHEMA = _schema(
    ("subject_key", pa.string(), False),
    ("hour", UTC_TS, False),
    ("ts", UTC_TS, False),
    ("source", pa.string(), False),
    ("line", pa.int64(), False),
    ("hour_cum_in_spec", pa.int64(), False),
    ("hour_cum_out_of_spec", pa.int64(), False),
    ("hour_cum_mispicks", pa.int64(), False),
)
HOURLY_SCHEMA = _schema(
    ("subject_key", pa.string(), False),
    ("hour", UTC_TS, False),
    ("in_spec", pa.int64(), False),
    ("out_of_spec", pa.int64(), False),
    ("mispicks", pa.int64(), False),
    ("rows", pa.int64(), False),
)
# An hour's sums (as in telemetry_hourly) and the totals of every row before the hour.
HOUR_START_SCHEMA = pa.schema(
    [
        *HOURLY_SCHEMA,
        *_schema(
            ("start_in_spec", pa.int64(), False),
            ("start_out_of_spec", pa.int64(), False),
            ("start_mispicks", pa.int64(), False),
        ),
    ]
)

Status = Literal["ingested", "waiting", "retrying", "failed", "quarantined", "blacklisted"]


@dataclass(frozen=True, slots=True)
class FileState:
    """What the platform knows of one landed report file."""

    source: str
    subject_key: str
    content_hash: str
    """SHA-256 of the whole file as last seen: equal hash, nothing to do."""
    size: int
    mtime_ns: int
    """Size and mtime unchanged: the file is not even read again."""
    ingested_bytes: int
    """The file's first `ingested_bytes` (complete lines) are in the raw table..."""
    ingested_hash: str | None
    """...and hash to this; a grown file starting with them is an append."""
    logical_start: dt.datetime | None
    logical_end: dt.datetime | None
    rows: int
    process_count: int
    status: Status
    attempts: int
    last_error: str | None
    next_attempt_at: dt.datetime | None
    last_seen: dt.datetime
    raw_version: int | None
    dirty_start: dt.datetime | None
    dirty_end: dt.datetime | None
    reingest_requested: bool = False

    @property
    def dirty_span(self) -> DirtySpan | None:
        if self.raw_version is None or self.dirty_start is None or self.dirty_end is None:
            return None
        return DirtySpan(self.dirty_start, self.dirty_end, self.raw_version)

    def with_span(self, span: DirtySpan) -> "FileState":
        return replace(
            self, dirty_start=span.start, dirty_end=span.end, raw_version=span.raw_version
        )


FILE_STATE_SCHEMA = _schema(
    ("source", pa.string(), False),
    ("subject_key", pa.string(), False),
    ("content_hash", pa.string(), False),
    ("size", pa.int64(), False),
    ("mtime_ns", pa.int64(), False),
    ("ingested_bytes", pa.int64(), False),
    ("ingested_hash", pa.string(), True),
    ("logical_start", UTC_TS, True),
    ("logical_end", UTC_TS, True),
    ("rows", pa.int64(), False),
    ("process_count", pa.int64(), False),
    ("status", pa.string(), False),
    ("attempts", pa.int64(), False),
    ("last_error", pa.string(), True),
    ("next_attempt_at", UTC_TS, True),
    ("last_seen", UTC_TS, False),
    ("raw_version", pa.int64(), True),
    ("dirty_start", UTC_TS, True),
    ("dirty_end", UTC_TS, True),
    ("reingest_requested", pa.bool_(), False),
)

EVENTS_SCHEMA = _schema(
    ("event_time", UTC_TS, False),
    ("dagster_run_id", pa.string(), False),
    ("subject_key", pa.string(), False),
    ("source", pa.string(), False),
    ("action", pa.string(), False),
    ("content_hash", pa.string(), True),
    ("rows_written", pa.int64(), False),
    ("raw_version", pa.int64(), True),
    ("detail", pa.string(), True),
)
BLACKLIST_SCHEMA = _schema(
    ("source", pa.string(), False),
    ("subject_key", pa.string(), False),
    ("reason", pa.string(), False),
    ("requested_at", UTC_TS, False),
    ("dagster_run_id", pa.string(), False),
)
QUARANTINE_SCHEMA = _schema(
    ("source", pa.string(), False),
    ("subject_key", pa.string(), False),
    ("content_hash", pa.string(), False),
    ("reason", pa.string(), False),
    ("data_end", UTC_TS, False),
    ("subject_newest", UTC_TS, False),
    ("quarantined_at", UTC_TS, False),
    ("released_at", UTC_TS, True),
    ("released_by_run", pa.string(), True),
)

SCHEMAS: Mapping[str, pa.Schema] = {
    RAW: RAW_SCHEMA,
    WITHIN_HOUR: WITHIN_HOUR_SCHEMA,
    HOUR_START: HOUR_START_SCHEMA,
    HOURLY: HOURLY_SCHEMA,
    FILE_STATE: FILE_STATE_SCHEMA,
    EVENTS: EVENTS_SCHEMA,
    BLACKLIST: BLACKLIST_SCHEMA,
    QUARANTINE: QUARANTINE_SCHEMA,
}

# Raw rows are replaced from a line onwards, in-hour totals by the hour. Writers cut their
# output into files of this size, each covering a narrow range of lines or hours, so a
# replacement rewrites the files straddling its edges and drops those inside, instead of
# copying a whole file or subject history that is mostly kept.
SMALL_FILES = {"delta.targetFileSize": str(2 * 1024 * 1024)}
# The sensor follows the tables its decision rests on through their change data feed: a
# tick reads the rows the commits since its last tick changed, not the whole table.
FOLLOWED = (FILE_STATE, BLACKLIST, QUARANTINE)
CHANGE_FEED = {"delta.enableChangeDataFeed": "true"}
TABLE_PROPERTIES: Mapping[str, Mapping[str, str]] = {
    **dict.fromkeys(SCHEMAS, {}),
    **dict.fromkeys(FOLLOWED, CHANGE_FEED),
    RAW: SMALL_FILES,
    WITHIN_HOUR: SMALL_FILES,
}


@dataclass(frozen=True)
class Event:
    event_time: dt.datetime
    dagster_run_id: str
    subject_key: str
    source: str
    action: str
    content_hash: str | None = None
    rows_written: int = 0
    raw_version: int | None = None
    detail: str | None = None


@dataclass(frozen=True)
class Quarantined:
    source: str
    subject_key: str
    content_hash: str
    reason: str
    data_end: dt.datetime
    subject_newest: dt.datetime
    quarantined_at: dt.datetime
    released_at: dt.datetime | None = None
    released_by_run: str | None = None


def ensure_table(lakehouse: Lakehouse, table: str, metadata: Mapping[str, Any]) -> None:
    """Create `table` empty with its schema if it does not exist yet."""
    lakehouse.create(
        table, SCHEMAS[table], metadata=metadata, table_properties=TABLE_PROPERTIES[table]
    )


def read_records(lakehouse: Lakehouse, table: str, subject_key: str | None) -> list[dict]:
    if not lakehouse.exists(table):
        return []
    where = eq("subject_key", subject_key) if subject_key is not None else None
    return lakehouse.read_arrow(table, where=where).to_pylist()


def file_states(lakehouse: Lakehouse, subject_key: str | None = None) -> dict[str, FileState]:
    """File states by source, of one subject or of all."""
    return {r["source"]: FileState(**r) for r in read_records(lakehouse, FILE_STATE, subject_key)}


def dirty_spans(lakehouse: Lakehouse, subject_key: str, after: int | None) -> list[DirtySpan]:
    """The dirty spans of the subject's files committed after raw version `after` (all of
    them when None): what a derived table reflecting `after` has still to take in."""
    where = eq("subject_key", subject_key)
    if after is not None:
        where = where & Compare("raw_version", ">", after)
    rows = lakehouse.read_arrow(FILE_STATE, where=where).to_pylist()
    spans = (FileState(**r).dirty_span for r in rows)
    return pending_spans([s for s in spans if s is not None], after)


def file_states_of_sources(lakehouse: Lakehouse, sources: Sequence[str]) -> dict[str, FileState]:
    rows = lakehouse.read_arrow(FILE_STATE, where=is_in("source", sources)).to_pylist()
    return {r["source"]: FileState(**r) for r in rows}


DERIVED = (WITHIN_HOUR, HOUR_START, HOURLY)
"""The tables derived from the raw rows, each recording the raw version it reflects."""


def reconciled_versions(lakehouse: Lakehouse, subject_keys: Sequence[str]) -> dict[str, int | None]:
    """Per subject, the lowest raw version its derived tables all reflect; None when one
    never reconciled it."""
    ids = {app_id(key): key for key in subject_keys}
    per_table = [lakehouse.app_transaction_versions(t, list(ids)) for t in DERIVED]
    lowest: dict[str, int | None] = {}
    for aid, key in ids.items():
        versions = [recorded.get(aid) for recorded in per_table]
        lowest[key] = lowest_version(versions)
    return lowest


def lowest_version(versions: Sequence[int | None]) -> int | None:
    """The lowest of `versions`; None when one is None (a table that never reflected it)."""
    known = [version for version in versions if version is not None]
    return min(known) if known and len(known) == len(versions) else None


def rows_by_hour(
    lakehouse: Lakehouse, subject_key: str, ranges: Sequence[tuple[dt.datetime, dt.datetime]] | None
) -> dict[dt.datetime, float]:
    """The subject's raw rows per UTC hour within the hour `ranges` (None: all), as the
    file states tell them (each file's rows spread evenly over the hours its data spans):
    an estimate to plan scans by, from one small read of the files overlapping them."""
    if not lakehouse.exists(FILE_STATE):
        return {}
    overlapping = None
    if ranges is not None:
        overlapping = any_of(
            Compare("logical_end", ">=", start) & Compare("logical_start", "<", end)
            for start, end in ranges
        )
    states = lakehouse.read_arrow(
        FILE_STATE,
        where=all_of((eq("subject_key", subject_key), Compare("rows", ">", 0), overlapping)),
        columns=["logical_start", "logical_end", "rows"],
    ).to_pylist()
    estimate: dict[dt.datetime, float] = {}
    for state in states:
        if state["logical_start"] is None or state["logical_end"] is None:
            continue
        first, last = floor_hour(state["logical_start"]), floor_hour(state["logical_end"])
        hours = (last - first) // HOUR + 1
        for n in range(hours):
            hour = first + n * HOUR
            estimate[hour] = estimate.get(hour, 0.0) + state["rows"] / hours
    return estimate


RUNNING_TOTALS_VIEW = View(
    TOTALS,
    """SELECT w.subject_key, w.ts, w.source, w.line,
       s.start_in_spec + w.hour_cum_in_spec AS cum_in_spec,
       s.start_out_of_spec + w.hour_cum_out_of_spec AS cum_out_of_spec,
       s.start_mispicks + w.hour_cum_mispicks AS cum_mispicks
FROM {0} w
JOIN {1} s ON w.subject_key = s.subject_key AND w.hour = s.hour""",
    (WITHIN_HOUR, HOUR_START),
)
"""`telemetry_running_totals` as a SQL view over its two tables (in the catalog,
`lakehouse.telemetry_running_totals`): what `running_totals` computes, for SQL clients."""


def last_hour(lakehouse: Lakehouse, subject_key: str) -> dt.datetime | None:
    """The subject's latest hour with rows in the running totals."""
    if not lakehouse.exists(HOUR_START):
        return None
    hours = lakehouse.read_arrow(
        HOUR_START, where=eq("subject_key", subject_key), columns=["hour"]
    )["hour"]
    return pc.max(hours).as_py() if len(hours) else None


def running_totals(
    lakehouse: Lakehouse,
    subject_key: str | None = None,
    *,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
) -> pa.Table:
    """`telemetry_running_totals` (TOTALS_SCHEMA), of one subject or all, optionally of
    rows with since <= ts < until: each row's in-hour sums plus its hour's start, ordered
    by subject, ts, source, line. Every reader of the running totals reads them here."""
    subject = None if subject_key is None else eq("subject_key", subject_key)
    rows_where = all_of((subject, within("ts", since, until)))
    first_hour = None if since is None else floor_hour(since)
    starts_where = all_of((subject, within("hour", first_hour, until)))
    if not lakehouse.exists(WITHIN_HOUR) or not lakehouse.exists(HOUR_START):
        return TOTALS_SCHEMA.empty_table()
    rows = lakehouse.read_arrow(WITHIN_HOUR, where=rows_where)
    hour_starts = lakehouse.read_arrow(
        HOUR_START,
        where=starts_where,
        columns=["subject_key", "hour", *(f"start_{name}" for name in COUNTS)],
    )
    joined = rows.join(hour_starts, keys=["subject_key", "hour"], join_type="inner")
    columns = {name: joined[name] for name in ("subject_key", "ts", "source", "line")}
    for name, cumulative in zip(COUNTS, CUMULATIVE, strict=True):
        columns[cumulative] = pc.add(joined[f"start_{name}"], joined[f"hour_cum_{name}"])
    order = [("subject_key", "ascending"), *ORDER]
    return pa.table(columns).cast(TOTALS_SCHEMA).sort_by(order)


def blacklisted(lakehouse: Lakehouse, subject_key: str | None = None) -> dict[str, str]:
    """Blacklisted sources -> reason."""
    return {r["source"]: r["reason"] for r in read_records(lakehouse, BLACKLIST, subject_key)}


def quarantine_entries(lakehouse: Lakehouse, subject_key: str | None = None) -> list[Quarantined]:
    return [Quarantined(**r) for r in read_records(lakehouse, QUARANTINE, subject_key)]


def released(entries: Iterable[Quarantined]) -> set[tuple[str, str]]:
    """(source, content hash) pairs an operator released."""
    return {(q.source, q.content_hash) for q in entries if q.released_at is not None}


def open_quarantine(entries: Iterable[Quarantined]) -> list[Quarantined]:
    return [q for q in entries if q.released_at is None]


def _table_of(records: Sequence[Any], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist([asdict(r) for r in records], schema=schema)


def save_file_states(
    lakehouse: Lakehouse,
    states: Sequence[FileState],
    *,
    handled_reingests: set[str],
    metadata: Mapping[str, Any],
    app_transaction: AppTransaction | None,
) -> None:
    """Upsert file states in one commit. A re-ingest flag an operator set meanwhile
    survives unless this write handled it."""
    if not states:
        return
    source = _table_of(states, FILE_STATE_SCHEMA).append_column(
        "reingest_handled", pa.array([s.source in handled_reingests for s in states])
    )
    columns = from_source(FILE_STATE_SCHEMA.names)
    lakehouse.merge(
        FILE_STATE,
        source,
        on=matches("source"),
        clauses=[
            WhenMatchedUpdate(
                set={
                    **columns,
                    "reingest_requested": IsTrue("t.reingest_requested")
                    & Not(IsTrue("s.reingest_handled")),
                }
            ),
            WhenNotMatchedInsert(values=columns),
        ],
        metadata=metadata,
        app_transaction=app_transaction,
    )


def log_events(lakehouse: Lakehouse, events: Sequence[Event], metadata: Mapping[str, Any]) -> None:
    if events:
        lakehouse.append(EVENTS, _table_of(events, EVENTS_SCHEMA), metadata=metadata)


def add_quarantine(
    lakehouse: Lakehouse, entries: Sequence[Quarantined], metadata: Mapping[str, Any]
) -> None:
    """Record quarantined (source, content) pairs; one already recorded stays as it is."""
    if entries:
        lakehouse.merge(
            QUARANTINE,
            _table_of(entries, QUARANTINE_SCHEMA),
            on=matches("source", "content_hash"),
            clauses=[WhenNotMatchedInsert()],
            metadata=metadata,
        )
