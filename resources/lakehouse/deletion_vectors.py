"""Rows that deletion vectors mark deleted, per data file, read from a table's log.

A count from the log is each file's `numRecords` less the cardinality of the deletion
vector on it. delta-rs lists a snapshot's files with their counts (`get_add_actions`)
but not the vectors on them (deltalake 1.6); its `DeltaTable.deletion_vectors()` reads
every vector's bitmap, where a count needs only the cardinality each vector's descriptor
carries (and here it stopped making progress on a table with 1,000 files that have
vectors). So the descriptors are read where the protocol keeps them: the newest `add`
of each file, in the snapshot's checkpoint and the commits after it. A file whose rows
are deleted again is added again, with its new vector, in the commit that does it.

Local tables only, with classic (single- or multi-part) checkpoints; anything else gives
None, and the caller counts by a query.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow.parquet as pq

_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet$")
_ANY_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.")


def deleted_rows(table_uri: str, version: int) -> dict[str, int] | None:
    """Per data file path (as in the log, percent-decoded) of `table_uri` at `version`,
    the rows its deletion vector deletes; files without a vector are left out. None when
    the log cannot be read here (an object store, a V2 checkpoint, commits gone)."""
    log = _local_log(table_uri)
    if log is None:
        return None
    names = set(os.listdir(log))
    checkpoint = _checkpoint_at_most(names, version)
    if checkpoint is None:
        return None
    since, parts = checkpoint
    newest: dict[str, int] = {}
    for part in parts:
        _read_checkpoint(log / part, newest)
    for at in range(since + 1, version + 1):
        name = f"{at:020d}.json"
        if name not in names:
            return None
        _read_commit(log / name, newest)
    return {path: rows for path, rows in newest.items() if rows}


def _local_log(table_uri: str) -> Path | None:
    parsed = urlparse(table_uri)
    if parsed.scheme not in ("", "file"):
        return None
    log = Path(unquote(parsed.path) if parsed.scheme else table_uri) / "_delta_log"
    return log if log.is_dir() else None


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


def _read_checkpoint(part: Path, newest: dict[str, int]) -> None:
    add = pq.read_schema(part).field("add").type
    names = {add.field(i).name for i in range(add.num_fields)}
    columns = ["add.path"] + (["add.deletionVector"] if "deletionVector" in names else [])
    actions = pq.read_table(part, columns=columns)
    paths = actions.column("path").to_pylist()
    vectors = (
        actions.column("deletionVector").to_pylist()
        if "deletionVector" in actions.column_names
        else [None] * len(paths)
    )
    for path, vector in zip(paths, vectors, strict=True):
        if path is not None:
            newest[unquote(path)] = (vector or {}).get("cardinality") or 0


def _read_commit(commit: Path, newest: dict[str, int]) -> None:
    with commit.open(encoding="utf-8") as lines:
        for line in lines:
            if '"add"' not in line:
                continue
            add = json.loads(line).get("add")
            if add is not None:
                newest[unquote(add["path"])] = (add.get("deletionVector") or {}).get(
                    "cardinality"
                ) or 0
