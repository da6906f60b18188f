"""What a file sensor remembers of each landed file, kept in a Delta control table.

A file is hashed again only when its size or mtime moved, so every sensor keeps each
file's size, mtime and content hash (and a label: what the sensor worked out about the
file, e.g. its subject, or what its day's latest materialization recorded). That state
grows with the landing zone, so it lives in the control table `sensor_file_state` (one
partition per sensor, written with delta-rs: sensors never start Spark), and the sensor's
cursor holds only the table version its state was written at:
`{"state_version": 12, "files": 4031}`, whatever the number of files.

Reading the state *as of the cursor's version* keeps Dagster's guarantee that a tick
whose cursor was not stored (the daemon died before it submitted the runs) is evaluated
again from the same state: the next tick finds the same changes and asks for the same
runs, whose run keys make them run once. A tick that changed nothing writes nothing.

Every file sensor's tick starts with `scan` (the remembered state, the listing, the
fingerprints and what changed) and ends with `Scan.cursor`, which may carry more of the
sensor's own cursor beside the version (`change_files` keeps the storage id of the last
materialization it read).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg
import pyarrow as pa

from assets.external import SENSOR_STATE
from resources import Lakehouse
from resources.lakehouse.port import VersionUnavailableError
from resources.lakehouse.predicates import eq
from resources.landing import FileStat, Fingerprint, LandingZone

TABLE = SENSOR_STATE
SCHEMA = pa.schema(
    [
        pa.field("sensor", pa.string(), nullable=False),
        pa.field("path", pa.string(), nullable=False),
        pa.field("size", pa.int64(), nullable=False),
        pa.field("mtime_ns", pa.int64(), nullable=False),
        pa.field("sha256", pa.string(), nullable=False),
        pa.field("label", pa.string(), nullable=True),
    ]
)


@dataclass(frozen=True)
class SeenFiles:
    """A sensor's files as of one tick: fingerprints by path, and labels by path."""

    fingerprints: Mapping[str, Fingerprint]
    labels: Mapping[str, str]
    version: int | None
    """The control table's version this state was read at (None: nothing stored yet)."""

    def same_as(self, fingerprints: Mapping[str, Fingerprint], labels: Mapping[str, str]) -> bool:
        return dict(self.fingerprints) == dict(fingerprints) and dict(self.labels) == dict(labels)


EMPTY = SeenFiles({}, {}, None)


def cursor_of(
    version: int | None, files: int, extra: Mapping[str, Any] | None = None
) -> str | None:
    if version is None:
        return None
    pointer = {"state_version": version, "files": files, **(extra or {})}
    return json.dumps(pointer, separators=(",", ":"))


def cursor_extra(cursor: str | None, key: str) -> Any:
    """What the sensor kept under `key` in its cursor beside the state's version (None:
    nothing, or no cursor)."""
    return json.loads(cursor).get(key) if cursor else None


def load(
    lakehouse: Lakehouse, sensor: str, cursor: str | None, log: logging.Logger | None = None
) -> SeenFiles:
    """The state the sensor's last stored tick left."""
    if not cursor:
        return EMPTY
    pointer = json.loads(cursor)
    if "state_version" not in pointer:
        # Not a pointer into the table (a cursor reset by hand, or from another version
        # of the sensor): start from no state. Every file is hashed once more, and the
        # runs it asks for carry the run keys they had, which Dagster runs once.
        return EMPTY
    version = pointer["state_version"]
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
    # Column by column: a row dict per file cost as much as listing the files again.
    paths, sizes, mtimes, hashes, names = (
        rows.column(name).to_pylist() for name in ("path", "size", "mtime_ns", "sha256", "label")
    )
    fingerprints = {
        p: Fingerprint(p, *facts) for p, *facts in zip(paths, sizes, mtimes, hashes, strict=True)
    }
    labels = {path: label for path, label in zip(paths, names, strict=True) if label is not None}
    return SeenFiles(fingerprints, labels, version)


def store(
    lakehouse: Lakehouse,
    sensor: str,
    previous: SeenFiles,
    fingerprints: Mapping[str, Fingerprint],
    labels: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> str | None:
    """Keep `fingerprints` (and `labels`) as the sensor's state; returns the cursor that
    points at it, with `extra` beside the version. Writes a commit only when the state
    changed."""
    labels = labels or {}
    if previous.version is not None and previous.same_as(fingerprints, labels):
        return cursor_of(previous.version, len(fingerprints), extra)
    if previous.version is None and not fingerprints and not previous.fingerprints:
        return None
    paths = sorted(fingerprints)
    columns: list[Sequence[Any]] = list(zip(*(fingerprints[p] for p in paths), strict=True))
    columns = columns or [[]] * 4
    rows = pa.table(
        {
            "sensor": [sensor] * len(paths),
            "path": paths,
            "size": columns[1],
            "mtime_ns": columns[2],
            "sha256": columns[3],
            "label": [labels.get(p) for p in paths],
        },
        schema=SCHEMA,
    )
    # The sensor's partition is replaced whole: a listing already costs one stat per
    # file, and one small Parquet file per sensor reads back in one request.
    result = lakehouse.in_process().overwrite(
        TABLE,
        rows,
        where=eq("sensor", sensor),
        partition_by=["sensor"],
        metadata={"sensor": sensor, "files": len(paths)},
    )
    return cursor_of(result.version, len(paths), extra)


@dataclass(frozen=True)
class Scan:
    """One tick's look at a sensor's files: what its last stored tick remembered, and the
    files listed now with their fingerprints (hashed again only where size or mtime moved).
    Every file sensor starts its tick with `scan` and ends it with `cursor`."""

    sensor: str
    seen: SeenFiles
    listed: list[FileStat]
    current: dict[str, Fingerprint]
    """The listed files' fingerprints by path (a file gone or unreadable since it was
    listed is left out: the next tick looks at it again)."""

    @property
    def previous(self) -> Mapping[str, Fingerprint]:
        return self.seen.fingerprints

    def changed(self) -> set[str]:
        """New files, files whose content changed, and files that disappeared."""
        previous, current = self.seen.fingerprints, self.current
        # An unchanged file's fingerprint is the remembered one itself (`fingerprints`).
        return {
            path
            for path, now in current.items()
            if (known := previous.get(path)) is not now
            and (known is None or known.sha256 != now.sha256)
        } | (previous.keys() - current.keys())

    def is_new_content(self, path: str) -> bool:
        """Whether the file at `path` is new, or its content changed, since the last tick."""
        known = self.seen.fingerprints.get(path)
        return known is None or known.sha256 != self.current[path].sha256

    def cursor(
        self,
        lakehouse: Lakehouse,
        keep: Mapping[str, Fingerprint] | None = None,
        labels: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> str | None:
        """The cursor of a tick that remembers `keep` (default: every current file) with
        `labels`, and `extra` beside the state's version."""
        kept = self.current if keep is None else keep
        return store(lakehouse, self.sensor, self.seen, kept, labels, extra)


def scan(
    sensor: str,
    context: dg.SensorEvaluationContext,
    lakehouse: Lakehouse,
    landing: LandingZone,
    folders: Sequence[tuple[str, str]],
) -> Scan:
    """The tick's look at the files under each `(folder, suffix)` of `folders`, against
    the state the sensor's last stored tick left (see `Scan`)."""
    seen = load(lakehouse, sensor, context.cursor, context.log)
    listed = [stat for folder, suffix in folders for stat in landing.list(folder, suffix=suffix)]
    current = landing.fingerprints(listed, seen.fingerprints)
    return Scan(sensor, seen, listed, current)
