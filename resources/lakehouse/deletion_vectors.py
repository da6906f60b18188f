"""Deletion vectors: what the log says each data file has lost, and the vectors
themselves, read and written in Delta's format.

A count from the log is each file's `numRecords` less the cardinality of the deletion
vector on it. delta-rs lists a snapshot's files with their counts (`get_add_actions`)
but not the vectors on them (deltalake 1.6); its `DeltaTable.deletion_vectors()` reads
every vector's bitmap, where a count needs only the cardinality each vector's descriptor
carries (and here it stopped making progress on a table with 1,000 files that have
vectors). So the descriptors are read where the protocol keeps them: the newest `add`
of each file, in the snapshot's checkpoint and the commits after it. A file whose rows
are deleted again is added again, with its new vector, in the commit that does it.

delta-rs reads vectors but cannot write them, so `VectorFile` writes them as Delta Spark
does (PROTOCOL.md, "Deletion Vector Format"): a file `deletion_vector_<uuid>.bin` in the
table's folder that opens with the format's version byte and holds, per vector, its
size, the bitmap (the magic number, then a 64-bit "portable" Roaring bitmap: the count
of 32-bit bitmaps, then each one's high word and its portable serialization, which
pyroaring writes) and a CRC-32 of it.

Local tables only, with classic (single- or multi-part) checkpoints; anything else gives
None, and the caller counts by a query (or, for a write, takes another way).
"""

from __future__ import annotations

import base64
import json
import os
import re
import struct
import threading
import uuid
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow.parquet as pq
from pyroaring import BitMap

_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet$")
_ANY_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.")


@dataclass(frozen=True)
class Added:
    """What the newest `add` of a data file says, as the log holds it (delta-rs lists a
    file's path decoded and its partition values typed)."""

    vector: dict[str, Any] | None
    """Its deletion vector's descriptor; None without one."""
    path: str = ""
    """Its path, as written (percent-encoded); read with `whole` only."""
    partition_values: dict[str, str | None] = field(default_factory=dict)
    """Its partition values, as written; read with `whole` only."""
    stats: str | None = None
    """Its statistics (JSON); read with `whole` only."""

    @classmethod
    def of(cls, add: dict[str, Any]) -> Added:
        """The whole of an `add` action, as a commit writes it."""
        return cls(
            add.get("deletionVector"),
            add["path"],
            add.get("partitionValues") or {},
            add.get("stats"),
        )

    @property
    def deleted(self) -> int:
        return int((self.vector or {}).get("cardinality") or 0)


def deleted_rows(table_uri: str, version: int) -> dict[str, int] | None:
    """Per data file path (as in the log, percent-decoded) of `table_uri` at `version`,
    the rows its deletion vector deletes; files without a vector are left out. None when
    the log cannot be read here (an object store, a V2 checkpoint, commits gone)."""
    added = newest_adds(table_uri, version, whole=False)
    if added is None:
        return None
    return {path: add.deleted for path, add in added.items() if add.deleted}


def newest_adds(table_uri: str, version: int, *, whole: bool = True) -> dict[str, Added] | None:
    """Per data file path (percent-decoded) of `table_uri` at `version`, its newest `add`
    (files removed since are among them: ask for the paths of the snapshot's files),
    with its vector, and with `whole` its path, partition values and statistics as
    written too. None when the log cannot be read here (see `deleted_rows`).

    The last read of each log is kept (`_LAST_READ`): a later read at the same or a later
    version starts from it and reads the commits after it only. A publish reads its
    table's log three times (to mark, to count, to record), and a commit that marks a
    year of days holds hundreds of actions."""
    log = _local_log(table_uri)
    if log is None:
        return None
    names = set(os.listdir(log))
    since, newest = _last_read(log, whole, version, names)
    if since is None:
        checkpoint = _checkpoint_at_most(names, version)
        if checkpoint is None:
            return None
        since, parts = checkpoint
        for part in parts:
            _read_checkpoint(log / part, newest, whole)
    for at in range(since + 1, version + 1):
        name = f"{at:020d}.json"
        if name not in names:
            return None
        _read_commit(log / name, newest, whole)
    identity = _identity(log, version)
    if identity is not None:
        with _LAST_READ_LOCK:
            _LAST_READ.pop((log, whole), None)
            _LAST_READ[(log, whole)] = (version, identity, dict(newest))
            while len(_LAST_READ) > _LOGS_KEPT:
                del _LAST_READ[next(iter(_LAST_READ))]  # the least recently read
    return newest


_LAST_READ: dict[tuple[Path, bool], tuple[int, tuple[int, int, int], dict[str, Added]]] = {}
"""Per log (and `whole`), the version last read, the identity of its commit file, and
what the read found."""
_LAST_READ_LOCK = threading.Lock()
_LOGS_KEPT = 16


def _last_read(
    log: Path, whole: bool, version: int, names: set[str]
) -> tuple[int | None, dict[str, Added]]:
    """(the version of the last read of `log` to start from, a copy of what it found);
    (None, {}) when there is none at or before `version`, or its commit file is not the
    one read then (the table was dropped and made again)."""
    with _LAST_READ_LOCK:
        kept = _LAST_READ.get((log, whole))
    if kept is None or kept[0] > version or f"{kept[0]:020d}.json" not in names:
        return None, {}
    at, identity, found = kept
    if _identity(log, at) != identity:
        return None, {}
    return at, dict(found)


def _identity(log: Path, version: int) -> tuple[int, int, int] | None:
    try:
        status = (log / f"{version:020d}.json").stat()
    except FileNotFoundError:
        return None
    return status.st_ino, status.st_mtime_ns, status.st_size


def local_root(table_uri: str) -> Path | None:
    """The folder of a table on a local disk; None for an object store."""
    parsed = urlparse(table_uri)
    if parsed.scheme not in ("", "file"):
        return None
    return Path(unquote(parsed.path) if parsed.scheme else table_uri)


def _local_log(table_uri: str) -> Path | None:
    root = local_root(table_uri)
    log = None if root is None else root / "_delta_log"
    return log if log is not None and log.is_dir() else None


def _checkpoint_at_most(names: set[str], version: int) -> tuple[int, list[str]] | None:
    """The newest complete classic checkpoint at or before `version`, as (its version, its
    files); (-1, []) when there is none and the log starts at version 0. None when the
    newest checkpoint there is of another kind."""
    parts_of: dict[int, dict[int, list[str]]] = {}
    other_kinds: set[int] = set()
    for name in names:
        if (match := _CHECKPOINT.match(name)) is not None:
            at = int(match.group(1))
            count = int(match.group(3) or 1)
            parts_of.setdefault(at, {}).setdefault(count, []).append(name)
        elif (match := _ANY_CHECKPOINT.match(name)) is not None:
            other_kinds.add(int(match.group(1)))
    complete = {
        at: sorted(files)
        for at, by_count in parts_of.items()
        for count, files in by_count.items()
        if len(files) == count and at <= version
    }
    newest = max(complete, default=-1)
    if any(newest < at <= version for at in other_kinds):
        return None
    if newest == -1:
        return (-1, []) if f"{0:020d}.json" in names else None
    return newest, complete[newest]


def _read_checkpoint(part: Path, newest: dict[str, Added], whole: bool) -> None:
    add = pq.read_schema(part).field("add").type
    names = {add.field(i).name for i in range(add.num_fields)}
    wanted = ["deletionVector"] + (["partitionValues", "stats"] if whole else [])
    columns = ["add.path"] + [f"add.{name}" for name in wanted if name in names]
    actions = pq.read_table(part, columns=columns)
    paths = actions.column("path").to_pylist()
    nothing = [None] * len(paths)
    vectors, partitions, stats = (
        actions.column(name).to_pylist() if name in actions.column_names else nothing
        for name in ("deletionVector", "partitionValues", "stats")
    )
    for path, vector, partition, stat in zip(paths, vectors, partitions, stats, strict=True):
        if path is None:
            continue
        if whole:
            values = dict(partition or ())  # a map column reads as (key, value) pairs
            newest[unquote(path)] = Added(vector, path, values, stat)
        else:
            newest[unquote(path)] = Added(vector)


def _read_commit(commit: Path, newest: dict[str, Added], whole: bool) -> None:
    with commit.open(encoding="utf-8") as lines:
        for line in lines:
            if '"add"' not in line:
                continue
            add = json.loads(line).get("add")
            if add is None:
                continue
            newest[unquote(add["path"])] = (
                Added.of(add) if whole else Added(add.get("deletionVector"))
            )


# -- the vectors themselves -----------------------------------------------------------

MAGIC = 1681511377
"""Opens every serialized bitmap (little-endian): a 64-bit "portable" Roaring bitmap."""
FORMAT_VERSION = 1
"""The first byte of a deletion vector file."""
_B85 = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"
_Z85 = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
# Z85 (which Delta uses for ids and inline vectors) is Base85 with another alphabet:
# Python 3.11 has Base85 but not Z85 (3.13 does, written the same way).
_TO_Z85, _FROM_Z85 = bytes.maketrans(_B85, _Z85), bytes.maketrans(_Z85, _B85)


def _z85(data: bytes) -> str:
    return base64.b85encode(data).translate(_TO_Z85).decode("ascii")


def _unz85(text: str) -> bytes:
    return base64.b85decode(text.encode("ascii").translate(_FROM_Z85))


def serialize(positions: Iterable[int]) -> bytes:
    """The bitmap of row `positions` (each below 2**32: a file of fewer rows), with the
    magic number that opens it."""
    bitmap = BitMap(positions)
    return struct.pack("<IQI", MAGIC, 1, 0) + bitmap.serialize()


def deserialize(data: bytes) -> np.ndarray:
    """The row positions of a serialized bitmap (`serialize`), in order."""
    (magic, buckets), at = struct.unpack_from("<IQ", data), 12
    if magic != MAGIC:
        raise ValueError(f"not a deletion vector: magic number {magic}, not {MAGIC}")
    parts = []
    for _ in range(buckets):
        (high,) = struct.unpack_from("<I", data, at)
        bitmap = BitMap.deserialize(data[at + 4 :])
        at += 4 + len(bitmap.serialize())
        parts.append(np.asarray(bitmap.to_array(), dtype=np.int64) + (high << 32))
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


def read_vector(table_root: Path, descriptor: dict[str, Any]) -> np.ndarray:
    """The row positions the deletion vector `descriptor` (of a file of the table in
    `table_root`) deletes, from its file or from the log (inline)."""
    return read_vectors(table_root, [descriptor])[0]


def read_vectors(table_root: Path, descriptors: Sequence[dict[str, Any]]) -> list[np.ndarray]:
    """`read_vector` of each descriptor, in order, each vector file read once: one commit
    writes the vectors of every file it marks into one file."""
    contents: dict[Path, bytes] = {}
    vectors = []
    for descriptor in descriptors:
        kind, where = descriptor["storageType"], descriptor["pathOrInlineDv"]
        size = int(descriptor["sizeInBytes"])
        if kind == "i":
            vectors.append(deserialize(_unz85(where)[:size]))
            continue
        if kind == "u":
            prefix, uid = where[:-20], uuid.UUID(bytes=_unz85(where[-20:]))
            path = table_root / prefix / f"deletion_vector_{uid}.bin"
        elif kind == "p":
            path = Path(unquote(urlparse(where).path))
        else:
            raise ValueError(f"unknown deletion vector storage type {kind!r}")
        if path not in contents:
            contents[path] = path.read_bytes()
        at = int(descriptor.get("offset") or 0)
        (stored,) = struct.unpack_from(">I", contents[path], at)
        data = contents[path][at + 4 : at + 4 + stored]
        crc = contents[path][at + 4 + stored : at + 8 + stored]
        if stored != size or len(crc) != 4 or zlib.crc32(data) != struct.unpack(">I", crc)[0]:
            raise ValueError(f"deletion vector at {path} is damaged (size or checksum)")
        vectors.append(deserialize(data))
    return vectors


@dataclass
class VectorFile:
    """One deletion vector file being written: vectors added one by one, each given the
    descriptor its `add` action carries; `write` puts the file in the table's folder."""

    table_root: Path
    uid: uuid.UUID = field(default_factory=uuid.uuid4)
    content: bytearray = field(default_factory=lambda: bytearray([FORMAT_VERSION]))

    @property
    def path(self) -> Path:
        return self.table_root / f"deletion_vector_{self.uid}.bin"

    def add(self, positions: np.ndarray) -> dict[str, Any]:
        data = serialize(positions.tolist())
        offset = len(self.content)
        self.content += struct.pack(">I", len(data)) + data + struct.pack(">I", zlib.crc32(data))
        return {
            "storageType": "u",
            "pathOrInlineDv": _z85(self.uid.bytes),
            "offset": offset,
            "sizeInBytes": len(data),
            "cardinality": len(positions),
        }

    def write(self) -> None:
        self.path.write_bytes(bytes(self.content))
