"""Rows of a table on a local disk read where they lie: with the path of their file (as
its log names it, decoded) and their position in it, the address by which a deletion
vector marks a row. delta-rs's scans give neither, so the files are read here, one by
one, with pyarrow, less the rows their vectors delete. The record-level index of
`user_events` holds these addresses (`assets/warehouse/key_index.py`), so that a
publish marks the rows it replaces without reading their files (`marking.py`).

Local tables only (like the vectors' own reader, `deletion_vectors`); the callers take
None for any other and do without the addresses.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from resources.lakehouse import deletion_vectors

PATH = "_path"
"""A row's file: its path relative to the table's folder, decoded."""
ROW = "_row"
"""A row's position in its file, from 0, counting the rows its vector deletes."""
FILE_READERS = 2
"""Threads reading a table's files (pyarrow releases the GIL while it reads): on two
cores, two read 366 small files as fast as four."""


def relative_paths(table_uri: str, file_uris: Sequence[str]) -> list[str] | None:
    """The paths (as `PATH` holds them) of a local table's data files given as URIs
    (the engine's `file_uris`, which are local paths under the table's folder); None
    for an object store."""
    root = deletion_vectors.local_root(table_uri)
    if root is None:
        return None
    prefix = f"{root.as_posix().rstrip('/')}/"
    if not all(uri.startswith(prefix) for uri in file_uris):
        return None
    return [uri[len(prefix) :] for uri in file_uris]


def added_between(
    table_uri: str, after: int, upto: int
) -> dict[str, deletion_vectors.Added] | None:
    """The data files the commits after version `after`, up to `upto`, brought into the
    table and left in it, with their newest `add` (path, partition values, vector): a
    file whose first action there is an `add` and whose last is one too. A file marked
    anew (removed and added again in one commit, with its new vector) was in the table
    before, and is left out. None when the log cannot tell here (an object store, a
    commit cleaned up)."""
    root = deletion_vectors.local_root(table_uri)
    log = None if root is None else root / "_delta_log"
    if log is None:
        return None
    first: dict[str, str] = {}
    newest: dict[str, deletion_vectors.Added | None] = {}
    for version in range(after + 1, upto + 1):
        try:
            lines = (log / f"{version:020d}.json").read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return None
        for line in lines:
            action = json.loads(line)
            if (add := action.get("add")) is not None:
                path = unquote(add["path"])
                first.setdefault(path, "add")
                newest[path] = deletion_vectors.Added.of(add)
            elif (remove := action.get("remove")) is not None:
                path = unquote(remove["path"])
                first.setdefault(path, "remove")
                newest[path] = None
    return {path: add for path, add in newest.items() if add is not None and first[path] == "add"}


def live_rows(
    table_uri: str,
    files: Mapping[str, deletion_vectors.Added],
    columns: Sequence[str],
) -> pa.Table:
    """`columns` of the live rows of `files` (by path, as `PATH` holds them, with their
    newest `add`) with `PATH` and `ROW`, file after file. A partition column is given
    as the log writes its value: text (null for none). Without files, the columns hold
    no rows, and no type."""
    root = deletion_vectors.local_root(table_uri)
    if root is None:
        raise ValueError(f"{table_uri} is not on a local disk: its files cannot be read here")
    paths = sorted(files)

    def read(path: str) -> pa.Table:
        add = files[path]
        stored = [c for c in columns if c not in add.partition_values]
        data = pq.ParquetFile(root / path).read(columns=stored, use_threads=False)
        positions = np.arange(data.num_rows, dtype=np.int64)
        if add.vector is not None:
            keep = np.ones(data.num_rows, dtype=bool)
            keep[deletion_vectors.read_vector(root, add.vector)] = False
            positions = positions[keep]
            data = data.filter(pa.array(keep))
        rows = len(positions)
        values = {
            c: (
                pa.repeat(pa.scalar(add.partition_values[c], pa.string()), rows)
                if c in add.partition_values
                else data.column(c)
            )
            for c in columns
        }
        values[PATH] = pa.DictionaryArray.from_arrays(
            pa.array(np.zeros(rows, np.int32)), pa.array([path])
        )
        values[ROW] = pa.array(positions)
        return pa.table(values)

    with ThreadPoolExecutor(FILE_READERS) as readers:
        parts = list(readers.map(read, paths))
    if not parts:
        return pa.table({c: pa.array([], pa.null()) for c in (*columns, PATH, ROW)})
    return pa.concat_tables(parts, promote_options="permissive").combine_chunks()
