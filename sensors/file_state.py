"""What a file sensor remembers of each landed file, and one tick's look at its files.

A file is hashed again only when its size or mtime moved, so every sensor keeps each
file's size, mtime and content hash (and a label: what the sensor worked out about the
file, e.g. its subject, or what its day's latest materialization recorded). That state
grows with the landing zone, so it lives in the control table `sensor_files` (one
partition per sensor, written with delta-rs: sensors never start Spark), and the sensor's
cursor holds only the table version its state was written at:
`{"state_version": 12, "files": 4031, "seq": 7}`, whatever the number of files.

A tick costs what changed, not what is known:
- the files come from the sensor's `Listing`s (`sensors/listing.py`), which name the
  files changed since a mark;
- the state a tick leaves is kept in the process beside the listings' marks, so the next
  tick compares with it only the files changed since (and the files the last tick left
  out, which are looked at again);
- a tick appends only the files that changed (rows numbered by a per-sensor sequence, the
  latest row of a path wins, a removed file is a row saying so), and every
  `COMPACT_AFTER_COMMITS` appends, or once the appended rows outnumber the files, the
  sensor's partition is rewritten as one row per file.
A tick in a process that has not seen the sensor's state (after a restart, or a cursor
from elsewhere) reads it from the table and compares every file once.

Reading the state *as of the cursor's version* keeps Dagster's guarantee that a tick
whose cursor was not stored (the daemon died before it submitted the runs) is evaluated
again from the same state: the next tick finds the same changes and asks for the same
runs, whose run keys make them run once. Each write carries the sequence number as a
Delta app transaction, so the re-evaluated tick's append is refused where the lost tick's
rows already stand, and the partition is rewritten whole instead. A tick that changed
nothing writes nothing.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
import pyarrow as pa

from assets.external import SENSOR_STATE
from resources import Lakehouse
from resources.lakehouse.port import AppTransaction, StaleWriteError, VersionUnavailableError
from resources.lakehouse.predicates import eq
from resources.landing import Fingerprint, LandingZone
from sensors.listing import Listing, Mark, changed_since, listings

TABLE = SENSOR_STATE
SCHEMA = pa.schema(
    [
        pa.field("sensor", pa.string(), nullable=False),
        pa.field("path", pa.string(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("removed", pa.bool_(), nullable=False),
        pa.field("size", pa.int64(), nullable=True),
        pa.field("mtime_ns", pa.int64(), nullable=True),
        pa.field("sha256", pa.string(), nullable=True),
        pa.field("label", pa.string(), nullable=True),
        # An object store's entity tag (added after the first release: rows written
        # before have none, and every write merges the column into an older table).
        pa.field("etag", pa.string(), nullable=True),
    ]
)
COMPACT_AFTER_COMMITS = 100
REMEMBERED_VERSIONS = 4
"""States kept in the process per sensor: the latest, and a few a lost tick's retry may
start from."""


@dataclass(frozen=True)
class SeenFiles:
    """A sensor's files as of one tick: fingerprints by path, and labels by path."""

    fingerprints: Mapping[str, Fingerprint]
    labels: Mapping[str, str]
    version: int | None
    """The control table's version this state was read at (None: nothing stored yet)."""
    seq: int = 0
    """The sequence number of the sensor's last write in that version."""
    appended: tuple[int, int] = (0, 0)
    """Commits and rows appended since the partition was last rewritten whole."""


EMPTY = SeenFiles({}, {}, None)


def cursor_of(seen: SeenFiles, extra: Mapping[str, Any] | None = None) -> str | None:
    if seen.version is None:
        return None
    pointer = {
        "state_version": seen.version,
        "files": len(seen.fingerprints),
        "seq": seen.seq,
        **(extra or {}),
    }
    return json.dumps(pointer, separators=(",", ":"))


def cursor_extra(cursor: str | None, key: str) -> Any:
    """What the sensor kept under `key` in its cursor beside the state's version (None:
    nothing, or no cursor)."""
    return json.loads(cursor).get(key) if cursor else None


@dataclass(frozen=True)
class _Remembered:
    """A state this process wrote or read, with the marks of the listings it reflects."""

    seen: SeenFiles
    marks: tuple[Mark, ...] = ()
    left_out: frozenset[str] = frozenset()
    """Listed files the state does not hold: looked at again by the next tick."""


_REMEMBERED: dict[tuple[str, str], OrderedDict[int, _Remembered]] = {}
_LOCK = threading.Lock()


def _remember(lakehouse: Lakehouse, sensor: str, remembered: _Remembered) -> None:
    version = remembered.seen.version
    if version is None:
        return
    with _LOCK:
        kept = _REMEMBERED.setdefault((lakehouse.uri(TABLE), sensor), OrderedDict())
        kept[version] = remembered
        kept.move_to_end(version)
        while len(kept) > REMEMBERED_VERSIONS:
            kept.popitem(last=False)


def _recalled(lakehouse: Lakehouse, sensor: str, version: int) -> _Remembered | None:
    with _LOCK:
        kept = _REMEMBERED.get((lakehouse.uri(TABLE), sensor))
        return kept.get(version) if kept else None


def load(
    lakehouse: Lakehouse, sensor: str, cursor: str | None, log: logging.Logger | None = None
) -> SeenFiles:
    """The state the sensor's last stored tick left."""
    return _load(lakehouse, sensor, cursor, log).seen


def _load(
    lakehouse: Lakehouse, sensor: str, cursor: str | None, log: logging.Logger | None
) -> _Remembered:
    if not cursor:
        return _Remembered(EMPTY)
    pointer = json.loads(cursor)
    if "state_version" not in pointer or "seq" not in pointer:
        # Not a pointer into the table (a cursor reset by hand, or from another version
        # of the sensor): start from no state. Every file is hashed once more, and the
        # runs it asks for carry the run keys they had, which Dagster runs once.
        return _Remembered(EMPTY)
    version = pointer["state_version"]
    remembered = _recalled(lakehouse, sensor, version)
    if remembered is not None:
        return remembered
    store = lakehouse.in_process()
    try:
        rows = store.read_arrow(TABLE, version=version, where=eq("sensor", sensor))
    except VersionUnavailableError as error:
        # The log of that version was cleaned up: only this sensor writes its partition,
        # so the latest state is what its last tick wrote.
        (log or logging.getLogger(__name__)).warning(
            f"{TABLE} version {version} is gone ({error}); reading the latest state"
        )
        version = store.version(TABLE)
        rows = store.read_arrow(TABLE, where=eq("sensor", sensor))
    remembered = _Remembered(_folded(rows, version))
    _remember(lakehouse, sensor, remembered)
    return remembered


def _folded(rows: pa.Table, version: int | None) -> SeenFiles:
    """The state the rows of one version say: each path's latest row, unless it says the
    file was removed."""
    rows = rows.sort_by("seq")
    # Column by column: a row dict per file cost as much as listing the files again.
    paths, seqs, removed, sizes, mtimes, hashes, names = (
        rows.column(name).to_pylist()
        for name in ("path", "seq", "removed", "size", "mtime_ns", "sha256", "label")
    )
    etags = rows.column("etag").to_pylist() if "etag" in rows.column_names else [None] * len(paths)
    fingerprints: dict[str, Fingerprint] = {}
    labels: dict[str, str] = {}
    for path, gone, size, mtime, sha, label, etag in zip(
        paths, removed, sizes, mtimes, hashes, names, etags, strict=True
    ):
        if gone:
            fingerprints.pop(path, None)
            labels.pop(path, None)
            continue
        fingerprints[path] = Fingerprint(path, size, mtime, sha, etag)
        if label is None:
            labels.pop(path, None)
        else:
            labels[path] = label
    first, last = (seqs[0], seqs[-1]) if seqs else (0, 0)
    commits = len(set(seqs)) - 1 if seqs else 0
    appended = (commits, sum(1 for seq in seqs if seq != first))
    return SeenFiles(fingerprints, labels, version, last, appended)


def _rows(
    sensor: str,
    seq: int,
    fingerprints: Mapping[str, Fingerprint],
    labels: Mapping[str, str],
    paths: Iterable[str],
) -> pa.Table:
    paths = sorted(paths)
    kept = [fingerprints.get(path) for path in paths]
    return pa.table(
        {
            "sensor": [sensor] * len(paths),
            "path": paths,
            "seq": [seq] * len(paths),
            "removed": [f is None for f in kept],
            "size": [f.size if f else None for f in kept],
            "mtime_ns": [f.mtime_ns if f else None for f in kept],
            "sha256": [f.sha256 if f else None for f in kept],
            "label": [labels.get(f.path) if f else None for f in kept],
            "etag": [f.etag if f else None for f in kept],
        },
        schema=SCHEMA,
    )


def _differing(
    previous: SeenFiles,
    fingerprints: Mapping[str, Fingerprint],
    labels: Mapping[str, str],
    looked_at: Collection[str] | None,
    relabelled_within: bool,
) -> set[str]:
    """Paths whose fingerprint or label differs between `previous` and the new state,
    looking only at `looked_at` (None: every path) and at labels that changed (only
    among `looked_at` when `relabelled_within`)."""
    before, named = previous.fingerprints, previous.labels
    paths = (fingerprints.keys() | before.keys()) if looked_at is None else set(looked_at)
    if not relabelled_within and labels is not named and labels != named:
        paths |= {p for p in labels.keys() | named.keys() if labels.get(p) != named.get(p)}
    return {
        path
        for path in paths
        if fingerprints.get(path) != before.get(path)
        or (path in fingerprints and labels.get(path) != named.get(path))
    }


def store(
    lakehouse: Lakehouse,
    sensor: str,
    previous: SeenFiles,
    fingerprints: Mapping[str, Fingerprint],
    labels: Mapping[str, str] | None = None,
    *,
    looked_at: Collection[str] | None = None,
    relabel: Mapping[str, str] | None = None,
) -> SeenFiles:
    """Keep `fingerprints` (and `labels`; None: the previous ones of the files kept,
    with the `looked_at` paths labelled by `relabel` when given) as the sensor's state,
    appending what differs from `previous` among `looked_at` (None: every path). Writes
    nothing when nothing differs."""
    relabelled_within = relabel is not None and looked_at is not None and labels is None
    if relabel is not None and labels is None:
        labels = dict(previous.labels)
        for path in previous.labels.keys() if looked_at is None else looked_at:
            labels.pop(path, None)
        labels.update(relabel)
    elif labels is None:
        labels = previous.labels
        if any(path not in fingerprints for path in labels):
            labels = {p: label for p, label in labels.items() if p in fingerprints}
    differing = _differing(previous, fingerprints, labels, looked_at, relabelled_within)
    if not differing and (previous.version is not None or not fingerprints):
        return previous
    commits, appended = previous.appended
    seq = previous.seq + 1
    metadata = {"sensor": sensor, "files": len(fingerprints), "changed": len(differing)}
    whole = (
        previous.version is None
        or commits + 1 >= COMPACT_AFTER_COMMITS
        or appended + len(differing) > max(len(fingerprints), 1_000)
    )
    if not whole:
        try:
            result = lakehouse.in_process().append(
                TABLE,
                _rows(sensor, seq, fingerprints, labels, differing),
                metadata=metadata,
                partition_by=["sensor"],
                app_transaction=AppTransaction(sensor, seq),
                merge_schema=True,
            )
            return SeenFiles(
                fingerprints, labels, result.version, seq, (commits + 1, appended + len(differing))
            )
        except StaleWriteError as stale:
            # A tick whose cursor was not stored wrote after the state this one started
            # from: its rows go, with the partition rewritten whole.
            seq = stale.current + 1
    return _rewrite(lakehouse, sensor, seq, fingerprints, labels, metadata)


def _rewrite(
    lakehouse: Lakehouse,
    sensor: str,
    seq: int,
    fingerprints: Mapping[str, Fingerprint],
    labels: Mapping[str, str],
    metadata: Mapping[str, Any],
) -> SeenFiles:
    """The sensor's partition replaced by one row per file, numbered `seq` (or after the
    sequence number the table already holds, from an earlier life of the sensor)."""
    for _ in range(2):
        try:
            result = lakehouse.in_process().overwrite(
                TABLE,
                _rows(sensor, seq, fingerprints, labels, fingerprints),
                where=eq("sensor", sensor),
                partition_by=["sensor"],
                metadata={**metadata, "rewritten": True},
                app_transaction=AppTransaction(sensor, seq),
                merge_schema=True,
            )
            return SeenFiles(fingerprints, labels, result.version, seq)
        except StaleWriteError as stale:
            seq = stale.current + 1
    raise RuntimeError(f"{TABLE}: sensor {sensor} kept being overtaken by another writer")


@dataclass
class Scan:
    """One tick's look at a sensor's files: what its last stored tick remembered, and the
    files listed now with their fingerprints (hashed again only where size or mtime moved).
    Every file sensor starts its tick with `scan` and ends it with `cursor`."""

    sensor: str
    seen: SeenFiles
    current: dict[str, Fingerprint]
    """The listed files' fingerprints by path (a file gone or unreadable since it was
    listed is left out: the next tick looks at it again)."""
    looked_at: set[str] | None
    """The paths that may differ from `seen` (None: any path may)."""
    listings: list[Listing]
    marks: tuple[Mark, ...]
    unread: frozenset[str] = field(default_factory=frozenset)
    """Listed files that could not be fingerprinted."""

    @property
    def previous(self) -> Mapping[str, Fingerprint]:
        return self.seen.fingerprints

    @property
    def touched(self) -> Collection[str]:
        """The paths this tick must look at: every one it may find changed (every listed
        or remembered path when the state was not compared before)."""
        if self.looked_at is None:
            return self.current.keys() | self.seen.fingerprints.keys()
        return self.looked_at

    def changed(self) -> set[str]:
        """New files, files whose content changed, and files that disappeared."""
        previous, current = self.seen.fingerprints, self.current
        return {
            path
            for path in self.touched
            if (known := previous.get(path)) is not (now := current.get(path))
            and (known is None or now is None or known.sha256 != now.sha256)
        }

    def is_new_content(self, path: str) -> bool:
        """Whether the file at `path` is new, or its content changed, since the last tick."""
        known = self.seen.fingerprints.get(path)
        return known is None or known.sha256 != self.current[path].sha256

    def in_folder(self, folder: str) -> list[Fingerprint]:
        """The fingerprints of the files directly in `folder`."""
        return [
            self.current[path]
            for listing in self.listings
            for path in listing.in_folder(folder)
            if path in self.current
        ]

    def cursor(
        self,
        lakehouse: Lakehouse,
        *,
        leave_out: Iterable[str] = (),
        labels: Mapping[str, str] | None = None,
        relabel: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> str | None:
        """The cursor of a tick that remembers every current file but `leave_out` (looked
        at again by the next tick), with `labels` (None: the ones remembered; with
        `relabel`, the touched files' labels are those it gives), and `extra` beside the
        state's version."""
        left_out = frozenset(leave_out) | self.unread
        kept = self.current
        if left_out:
            kept = dict(self.current)
            for path in left_out:
                kept.pop(path, None)
        looked_at = None if self.looked_at is None else self.looked_at | left_out
        stored = store(
            lakehouse, self.sensor, self.seen, kept, labels, looked_at=looked_at, relabel=relabel
        )
        _remember(lakehouse, self.sensor, _Remembered(stored, self.marks, left_out))
        return cursor_of(stored, extra)


def scan(
    sensor: str,
    context: dg.SensorEvaluationContext,
    lakehouse: Lakehouse,
    landing: LandingZone,
    folders: Iterable[tuple[str, str]],
) -> Scan:
    """The tick's look at the files under each `(folder, suffix)` of `folders`, against
    the state the sensor's last stored tick left (see `Scan`)."""
    found = listings(sensor, landing, folders)
    marks = tuple(listing.mark for listing in found)
    remembered = _load(lakehouse, sensor, context.cursor, context.log)
    seen = remembered.seen
    looked_at = changed_since(found, remembered.marks) if remembered.marks else None
    if looked_at is None:
        listed = [stat for listing in found for stat in listing.files.values()]
        current = landing.fingerprints(listed, seen.fingerprints)
        unread = frozenset(stat.path for stat in listed) - current.keys()
        return Scan(sensor, seen, current, None, found, marks, unread)
    looked_at |= remembered.left_out
    current = dict(seen.fingerprints)
    files_of = [listing.files for listing in found]
    stats = [
        stat
        for path in looked_at
        if (stat := next((files[path] for files in files_of if path in files), None))
    ]
    for path in looked_at:
        current.pop(path, None)
    current.update(landing.fingerprints(stats, seen.fingerprints))
    unread = frozenset(stat.path for stat in stats) - current.keys()
    return Scan(sensor, seen, current, looked_at, found, marks, unread)
