"""The telemetry sensor's decision, kept in the code server from tick to tick.

A tick's decision rests on every landed report file and on the control tables: file
states, blacklist, quarantine releases, and the raw versions the derived tables reflect.
Reading all of that at every tick cost a tick 0.5 s among 100,000 files before anything
was ingested, and a read of the whole file-state table besides. So the code server keeps
the facts in a `PendingIndex` and brings them up to date:
- landed files: only the paths the file scan touched;
- file states, blacklist and quarantine: only the rows their commits since the last tick
  changed, from the tables' change data feed (on a table made before the feed was
  enabled, the rows of the files those commits swapped); the whole table when the
  changes cannot be read (a version or file gone, a table made anew);
- reflected versions: looked up again only when a derived table committed.

A tick in a process that kept nothing (after a restart), or whose kept files are not the
state the cursor names (a lost tick evaluated again), decides from every file once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import pyarrow as pa

from assets.telemetry import control
from assets.telemetry.control import FileState
from assets.telemetry.pending import PendingIndex
from resources import Lakehouse
from resources.lakehouse import ChangesUnavailableError

_FEED_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")
_REMOVED = ("delete", "update_preimage")


@dataclass
class Decision:
    """What one process keeps of a telemetry sensor's decision."""

    index: PendingIndex = field(default_factory=PendingIndex)
    files_version: int | None = None
    """The `sensor_files` version whose files the index holds as landed (None: none)."""
    followed: dict[str, int | None] = field(default_factory=dict)
    """The version of each followed control table the index holds."""
    derived: tuple[int | None, ...] | None = None
    reflected: dict[str, int | None] = field(default_factory=dict)


_KEPT: dict[tuple[str, str], Decision] = {}
_LOCK = threading.Lock()


def kept(lakehouse: Lakehouse, sensor: str) -> Decision:
    """The decision this process keeps for the sensor over this lakehouse."""
    with _LOCK:
        return _KEPT.setdefault((lakehouse.uri(control.FILE_STATE), sensor), Decision())


def follow_control_tables(decision: Decision, lakehouse: Lakehouse) -> None:
    """Bring the index's file states, blacklist and releases, and the reflected versions,
    up to the control tables' latest versions."""
    store = lakehouse.in_process()
    for followed in _FOLLOWED:
        version = store.version(followed.table)
        known = decision.followed.get(followed.table)
        if version == known:
            continue
        changes = None
        if known is not None and version is not None and version > known:
            try:
                changes = store.changes(followed.table, after=known, until=version)
            except ChangesUnavailableError:
                changes = None
        if changes is not None:
            followed.apply_changes(decision.index, changes)
        else:
            table = None if version is None else store.read_arrow(followed.table, version=version)
            followed.replace(decision.index, [] if table is None else table.to_pylist())
        decision.followed[followed.table] = version
    _follow_reflected(decision, store)


@dataclass(frozen=True)
class _Followed:
    """A control table the decision follows: its key, how a row (present or removed)
    changes the index, and the keys of what the index holds of it."""

    table: str
    key: tuple[str, ...]
    apply: Callable[[PendingIndex, dict, bool], None]
    held: Callable[[PendingIndex], Iterable[tuple]]

    def apply_changes(self, index: PendingIndex, changes: pa.Table) -> None:
        """Each commit's removed rows (deleted, or the old image of an updated row), then
        its added ones, commit after commit: the table holds one row per key, so a key's
        last added row is what the table holds."""
        rows = changes.to_pylist()
        rows.sort(key=lambda row: (row["_commit_version"], row["_change_type"] not in _REMOVED))
        for row in rows:
            present = row["_change_type"] not in _REMOVED
            self.apply(index, {k: v for k, v in row.items() if k not in _FEED_COLUMNS}, present)

    def replace(self, index: PendingIndex, rows: list[dict]) -> None:
        """The table's rows as they are now, in place of what the index held of it."""
        current = {tuple(row[k] for k in self.key): row for row in rows}
        for key in list(self.held(index)):
            if key not in current:
                self.apply(index, dict(zip(self.key, key, strict=True)), False)
        for row in current.values():
            self.apply(index, row, True)


def _apply_state(index: PendingIndex, row: dict, present: bool) -> None:
    index.set_state(row["source"], FileState(**row) if present else None)


def _apply_blacklist(index: PendingIndex, row: dict, present: bool) -> None:
    index.set_blacklisted(row["source"], row["subject_key"] if present else None)


def _apply_quarantine(index: PendingIndex, row: dict, present: bool) -> None:
    released = present and row["released_at"] is not None
    index.set_released(row["source"], row["content_hash"], released)


_FOLLOWED = (
    _Followed(control.FILE_STATE, ("source",), _apply_state, lambda i: ((s,) for s in i.states)),
    _Followed(
        control.BLACKLIST, ("source",), _apply_blacklist, lambda i: ((s,) for s in i.blacklist)
    ),
    _Followed(
        control.QUARANTINE, ("source", "content_hash"), _apply_quarantine, lambda i: i.released
    ),
)


def _follow_reflected(decision: Decision, store: Lakehouse) -> None:
    derived = tuple(store.version(table) for table in control.DERIVED)
    subjects = set(decision.index.subjects_with_spans())
    if derived != decision.derived:
        decision.reflected = control.reconciled_versions(store, sorted(subjects))
        decision.derived = derived
    elif missing := subjects - decision.reflected.keys():
        decision.reflected.update(control.reconciled_versions(store, sorted(missing)))
