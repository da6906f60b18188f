"""What a file sensor remembers of each landed file, kept in a Delta control table.

A file is hashed again only when its size or mtime moved, so every sensor keeps each
file's size, mtime and content hash (and a label worked out once per content, e.g. its
subject). That state grows with the landing zone, so it lives in the control table
`sensor_file_state` (one partition per sensor, written with delta-rs: sensors never start
Spark), and the sensor's cursor holds only the table version its state was written at:
`{"state_version": 12, "files": 4031}`, whatever the number of files.

Reading the state *as of the cursor's version* keeps Dagster's guarantee that a tick
whose cursor was not stored (the daemon died before it submitted the runs) is evaluated
again from the same state: the next tick finds the same changes and asks for the same
runs, whose run keys make them run once. A tick that changed nothing writes nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa

from assets.external import SENSOR_STATE
from resources import Lakehouse
from resources.lakehouse.port import VersionUnavailableError
from resources.lakehouse.predicates import eq
from resources.landing import Fingerprint

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


def cursor_of(version: int | None, files: int) -> str | None:
    if version is None:
        return None
    return json.dumps({"state_version": version, "files": files}, separators=(",", ":"))


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
    fingerprints, labels = {}, {}
    for row in rows.to_pylist():
        path = row["path"]
        fingerprints[path] = Fingerprint(path, row["size"], row["mtime_ns"], row["sha256"])
        if row["label"] is not None:
            labels[path] = row["label"]
    return SeenFiles(fingerprints, labels, version)


def store(
    lakehouse: Lakehouse,
    sensor: str,
    previous: SeenFiles,
    fingerprints: Mapping[str, Fingerprint],
    labels: Mapping[str, str] | None = None,
) -> str | None:
    """Keep `fingerprints` (and `labels`) as the sensor's state; returns the cursor that
    points at it. Writes a commit only when the state changed."""
    labels = labels or {}
    if previous.version is not None and previous.same_as(fingerprints, labels):
        return cursor_of(previous.version, len(fingerprints))
    if previous.version is None and not fingerprints and not previous.fingerprints:
        return None
    paths = sorted(fingerprints)
    rows = pa.table(
        {
            "sensor": [sensor] * len(paths),
            "path": paths,
            "size": [fingerprints[p].size for p in paths],
            "mtime_ns": [fingerprints[p].mtime_ns for p in paths],
            "sha256": [fingerprints[p].sha256 for p in paths],
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
    return cursor_of(result.version, len(paths))
