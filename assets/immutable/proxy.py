"""Proxy: `device_snapshot`, write-once snapshots of `device_catalog` behind one access point.

Each run writes the whole catalog, as of one Delta version, into a new table named from
the run, `device_snapshot/run=<run id>`. A snapshot table is written once, in one commit,
and never again: a second write to its name is refused (WriteOnceError) and leaves it
intact; it is created `delta.appendOnly`, and the maintenance jobs refuse to compact or
vacuum a snapshot while the proxy references it.

Readers never name a snapshot. They go through the proxy: the Delta table
`device_snapshot_manifest` lists every snapshot with its status (`current`, `kept`,
`retired`); `read_device_snapshot` and the Spark SQL view `device_snapshot` follow the
`current` one. Publishing a snapshot rewrites the manifest in one commit, so a reader
sees the old snapshot or the new one, never a partial one: the new table is complete
before the manifest names it.

Retention retires a snapshot (marks it in the manifest, then drops its table) only when
it is neither current nor among the newest `keep_snapshots`, and it stopped being current
more than `grace_hours` ago, so a reader that read the manifest just before a switch can
still finish reading the snapshot it found. `point_device_snapshot` points the proxy back
at any snapshot not retired.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from resources.catalog import View
from resources.lakehouse import CommitResult, Lakehouse

SNAPSHOTS = "device_snapshot"
SNAPSHOT_MANIFEST = "device_snapshot_manifest"
VIEW = "device_snapshot"
Status = Literal["current", "kept", "retired"]
SNAPSHOT_MANIFEST_SCHEMA = pa.schema(
    [
        pa.field("snapshot", pa.string(), nullable=False),
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("source_version", pa.int64(), nullable=False),
        pa.field("rows", pa.int64(), nullable=False),
        pa.field("created_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("status_since", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)
_RUN_ID = re.compile(r"[0-9A-Za-z_-]+")


class WriteOnceError(Exception):
    """A write-once table was to be written a second time."""

    def __init__(self, table: str) -> None:
        super().__init__(
            f"write-once table {table!r} already exists; it is never written twice "
            "(a new snapshot goes into a new table)"
        )
        self.table = table


class SnapshotError(ValueError):
    """The proxy cannot point at, read, or change what was asked."""


@dataclass(frozen=True)
class SnapshotEntry:
    snapshot: str
    run_id: str
    source_version: int
    rows: int
    created_at: dt.datetime
    status: Status
    status_since: dt.datetime


def snapshot_table(run_id: str) -> str:
    """The table of the snapshot written by run `run_id`."""
    if not _RUN_ID.fullmatch(run_id):
        raise SnapshotError(f"run id {run_id!r} cannot name a snapshot table")
    return f"{SNAPSHOTS}/run={run_id}"


def write_once(
    lakehouse: Lakehouse, table: str, data: DataFrame | pa.Table, *, metadata: Mapping[str, Any]
) -> CommitResult:
    """Create `table` holding `data`, in one commit; refuse if it exists."""
    if lakehouse.exists(table):
        raise WriteOnceError(table)
    return lakehouse.append(
        table, data, metadata=metadata, table_properties={"delta.appendOnly": "true"}
    )


def manifest_entries(lakehouse: Lakehouse) -> list[SnapshotEntry]:
    if not lakehouse.exists(SNAPSHOT_MANIFEST):
        return []
    rows = lakehouse.read_arrow(SNAPSHOT_MANIFEST).to_pylist()
    return sorted((SnapshotEntry(**row) for row in rows), key=lambda e: e.created_at)


def current_snapshot(entries: Iterable[SnapshotEntry]) -> SnapshotEntry | None:
    return next((e for e in entries if e.status == "current"), None)


def referenced_snapshots(lakehouse: Lakehouse) -> set[str]:
    """Snapshot tables the proxy references (current or kept): never to be rewritten."""
    return {e.snapshot for e in manifest_entries(lakehouse) if e.status != "retired"}


def point_at(
    entries: Sequence[SnapshotEntry], snapshot: str, *, now: dt.datetime
) -> list[SnapshotEntry]:
    """The manifest with `snapshot` current and the previously current one kept."""
    target = next((e for e in entries if e.snapshot == snapshot), None)
    if target is None:
        raise SnapshotError(f"{snapshot!r} is not a snapshot in {SNAPSHOT_MANIFEST}")
    if target.status == "retired":
        raise SnapshotError(f"{snapshot!r} was retired on {target.status_since:%Y-%m-%d %H:%M}")
    return [
        replace(e, status="current", status_since=now)
        if e.snapshot == snapshot
        else replace(e, status="kept", status_since=now)
        if e.status == "current"
        else e
        for e in entries
    ]


def retire(
    entries: Sequence[SnapshotEntry], *, now: dt.datetime, keep: int, grace: dt.timedelta
) -> list[SnapshotEntry]:
    """The manifest with snapshots retired that are not current, not among the `keep`
    newest, and stopped being current more than `grace` before `now`."""
    newest = (
        {e.snapshot for e in sorted(entries, key=lambda e: e.created_at)[-keep:]} if keep else set()
    )
    return [
        replace(e, status="retired", status_since=now)
        if e.status == "kept" and e.snapshot not in newest and now - e.status_since > grace
        else e
        for e in entries
    ]


def write_manifest(
    lakehouse: Lakehouse, entries: Sequence[SnapshotEntry], *, metadata: Mapping[str, Any]
) -> CommitResult:
    """Replace the whole manifest in one commit: readers switch atomically, and SQL
    readers follow when the run registers the view (`snapshot_view`)."""
    rows = pa.Table.from_pylist([vars(e) for e in entries], schema=SNAPSHOT_MANIFEST_SCHEMA)
    result = lakehouse.overwrite(SNAPSHOT_MANIFEST, rows, metadata=metadata)
    lakehouse.expose(snapshot_view(entries))
    return result


def snapshot_view(entries: Iterable[SnapshotEntry]) -> View | None:
    """`device_snapshot` by name in SQL: the current snapshot (None: there is none)."""
    current = current_snapshot(entries)
    return None if current is None else View(VIEW, "SELECT * FROM {0}", (current.snapshot,))


def drop_retired(lakehouse: Lakehouse, entries: Sequence[SnapshotEntry]) -> list[str]:
    """Drop the tables of retired snapshots (after the manifest stopped naming them)."""
    return [e.snapshot for e in entries if e.status == "retired" and lakehouse.drop(e.snapshot)]


def read_device_snapshot(lakehouse: Lakehouse) -> DataFrame:
    """The current snapshot, as a Spark DataFrame (through the proxy)."""
    current = current_snapshot(manifest_entries(lakehouse))
    if current is None:
        raise SnapshotError(
            f"{SNAPSHOT_MANIFEST} names no current snapshot: materialize device_snapshot"
        )
    return lakehouse.read(current.snapshot)


def register_device_snapshot_view(lakehouse: Lakehouse, spark: SparkSession) -> DataFrame:
    """Register the Spark SQL view `device_snapshot` over the current snapshot. A view
    resolves the snapshot when it is registered: register it again to follow a switch."""
    frame = read_device_snapshot(lakehouse)
    frame.createOrReplaceTempView(VIEW)
    return spark.table(VIEW)
