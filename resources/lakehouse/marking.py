"""A newest-wins upsert that marks the rows it replaces instead of copying their files.

delta-rs's MERGE is copy-on-write: every file holding a row it replaces is written
again, whole. A batch whose older versions lie over a year of days rewrites a file per
day (10k rows into 10M: 366 files, 3.7 s, where a batch whose older versions share its
day takes 0.5 s). Delta's answer is the deletion vector: the replaced row is marked in a
bitmap beside its file, and the file stays. delta-rs 1.6 reads vectors, keeps them in
its MERGE and OPTIMIZE, but cannot write them, so this module writes the commit itself,
the way Delta Spark's MERGE with deletion vectors does:

- the rows of the batch's keys in the partitions named are found with their positions:
  where the caller located them (`NewestWins.located`, from an index of the table's
  rows), reading no data file, or else read from the partitions' files; less the rows
  their vectors already delete;
- a source row that sorts after the stored row of its key (`order`, SQL's comparison:
  a NULL never sorts after) replaces it; one without a stored row is inserted; one that
  does not sort after the stored row is dropped;
- the winning source rows are written as new files, one per partition; each file that
  loses rows gets a new vector (its old one and the new rows) in one vector file;
- one commit holds them (a `remove` and an `add` with the vector for each marked file,
  an `add` per new file, the app transaction, the commit info with its metrics), put in
  the log only if no commit took its version first (a hard link, which refuses to
  replace a file). A commit that lost the race is a conflict: its files are deleted and
  the caller starts again from the newer snapshot.

It applies to local tables whose features it knows how to keep (deletion vectors on; no
change data feed, constraints, column mapping, row tracking or append-only) and that are
partitioned by the one column named; `upsert` says None for any other, and the caller
MERGEs.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from resources.lakehouse import deletion_vectors
from resources.lakehouse.located import FILE_READERS, PATH, ROW
from resources.lakehouse.port import AppTransaction, NewestWins
from resources.lakehouse.predicates import partition_text

KNOWN_WRITER_FEATURES = frozenset(
    {"deletionVectors", "invariants", "appendOnly", "timestampNtz", "variantType"}
)
"""Writer features a commit of this module keeps: the last four ask nothing of a writer
whose table sets no invariant or `delta.appendOnly` and whose rows hold no variant
(checked by `_writable`)."""
_PLAIN_VALUE = re.compile(r"^[0-9A-Za-z_.-]+$")
"""Partition values that name a folder as they are (no escaping to agree on)."""


def upsert(
    delta: DeltaTable,
    source: pa.Table,
    files: pa.Table,
    *,
    upsert: NewestWins,
    commit_info: Mapping[str, Any],
    app_transaction: AppTransaction | None,
) -> int | None:
    """`upsert` of `source` into `delta` (a snapshot, version v), as the module's
    docstring says, reading the rows of `files` (its add actions, flattened: the files of the
    partitions the upsert may touch); returns the version committed, v + 1. None when
    the table is not one this module writes (nothing is written then). Raises
    CommitFailedError when another commit took version v + 1."""
    key, order, partition_column = upsert.key, upsert.order, upsert.partition_column
    root = deletion_vectors.local_root(delta.table_uri)
    if root is None or not _writable(delta, partition_column, source):
        return None
    if pc.count_distinct(source[key]).as_py() != source.num_rows:
        return None  # the MERGE refuses a key twice in its source, in its own words
    version = delta.version()
    added = deletion_vectors.newest_adds(delta.table_uri, version)
    paths = [unquote(path) for path in files["path"].to_pylist()]
    if added is None or any(path not in added for path in paths):
        return None
    values = pc.unique(source[partition_column]).to_pylist()
    if not all(_PLAIN_VALUE.match(partition_text(v)) for v in values if v is not None):
        return None  # a folder name to escape, as every reader agrees: left to the MERGE
    deleted: dict[int, np.ndarray] = {}
    stored = None
    if upsert.located is not None:
        stored = _located_rows(root, paths, added, upsert.located, key, order[0], deleted)
    if stored is None:
        stored = _stored_rows(root, paths, added, source.select([key, order[0]]), deleted)
    beaten, wins, inserted = _decide(root, paths, source, stored, key, order)
    winners = source.filter(wins)
    vectors = deletion_vectors.VectorFile(root)
    written: list[Path] = []
    try:
        marks = _marks(files, added, deleted, beaten, vectors)
        marked = [a["add"]["path"] for a in marks if "add" in a]
        if marked:
            vectors.write()
            written.append(vectors.path)
        adds = _new_files(root, winners, delta, partition_column, written)
        had_vectors = [
            a["remove"]["path"] for a in marks if "deletionVector" in a.get("remove", {})
        ]
        regrown = len(set(had_vectors) & set(marked))
        metrics = {
            "numSourceRows": source.num_rows,
            "numTargetRowsInserted": inserted,
            "numTargetRowsUpdated": beaten.num_rows,
            "numTargetRowsDeleted": 0,
            "numTargetRowsCopied": 0,
            "numTargetFilesAdded": len(adds),
            "numTargetFilesRemoved": len(marks) - 2 * len(marked),
            # As Delta Spark counts them: every vector written is added; one in place of
            # the file's old vector is updated as well, and the old one removed (so is
            # the vector of a file removed).
            "numTargetDeletionVectorsAdded": len(marked),
            "numTargetDeletionVectorsUpdated": regrown,
            "numTargetDeletionVectorsRemoved": len(had_vectors),
        }
        commit = _commit(commit_info, version, metrics, app_transaction, marks + adds)
        _put(root, version + 1, commit)
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise
    return version + 1


def _writable(delta: DeltaTable, partition_column: str, source: pa.Table) -> bool:
    protocol, metadata = delta.protocol(), delta.metadata()
    config = metadata.configuration
    features = set(protocol.writer_features or ())
    return (
        protocol.min_writer_version == 7
        and "deletionVectors" in features
        and features <= KNOWN_WRITER_FEATURES
        and config.get("delta.enableDeletionVectors") == "true"
        and config.get("delta.appendOnly", "false") != "true"
        and config.get("delta.enableChangeDataFeed", "false") != "true"
        and config.get("delta.columnMapping.mode", "none") == "none"
        and not any(name.startswith("delta.constraints.") for name in config)
        and "delta.invariants" not in delta.schema().to_json()
        and list(metadata.partition_columns) == [partition_column]
        and not any(pa.types.is_struct(f.type) for f in source.schema)
    )


def _stored_rows(
    root: Path,
    paths: list[str],
    added: Mapping[str, deletion_vectors.Added],
    wanted: pa.Table,
    deleted: dict[int, np.ndarray],
) -> pa.Table:
    """The live rows of the files `paths` whose key (`wanted`'s first column) is among
    `wanted`'s: the key, the column that orders versions first (`wanted`'s second, which
    decides most of them), the file's index in `paths` (`_file`) and the row's position
    in it (`_row`). The rows a file's vector deletes already go into `deleted`, by the
    file's index. The other columns that order versions are
    left to `_decide`, which reads them for the rows still tied only: together they cost
    several times what these two do."""
    key, first = wanted.column_names
    keys = wanted[key].combine_chunks()

    def read(index: int) -> pa.Table:
        rows = pq.ParquetFile(root / paths[index]).read(columns=[key, first], use_threads=False)
        live = pc.is_in(rows.column(0), value_set=keys)
        vector = added[paths[index]].vector
        if vector is not None:
            deleted[index] = deletion_vectors.read_vector(root, vector)
            gone = np.zeros(rows.num_rows, dtype=bool)
            gone[deleted[index]] = True
            live = pc.and_(live, pa.array(~gone))
        positions = pc.indices_nonzero(live).cast(pa.int64())
        return pa.table(
            {
                key: rows.column(0).take(positions),
                first: rows.column(1).take(positions),
                "_file": pa.array(np.full(len(positions), index, np.int32)),
                "_row": positions,
            }
        )

    with ThreadPoolExecutor(FILE_READERS) as readers:
        parts = list(readers.map(read, range(len(paths))))
    if not parts:
        none = wanted.schema.empty_table()
        return none.append_column("_file", pa.array([], pa.int32())).append_column(
            "_row", pa.array([], pa.int64())
        )
    return pa.concat_tables(parts, promote_options="permissive")


def _located_rows(
    root: Path,
    paths: list[str],
    added: Mapping[str, deletion_vectors.Added],
    located: pa.Table,
    key: str,
    first: str,
    deleted: dict[int, np.ndarray],
) -> pa.Table | None:
    """`_stored_rows` from where the caller says the rows of the source's keys lie
    (`NewestWins.located`), without reading a data file: the rows located that are
    live (their file's vector, read into `deleted`, leaves them), each once. None when
    a file located is not among `paths` (it left the table after the rows were located:
    rows may have moved, so the partitions are read)."""
    index_of = {path: at for at, path in enumerate(paths)}
    files = pc.cast(located[PATH], pa.string()).combine_chunks()
    named = pc.unique(files).to_pylist()
    if any(path not in index_of for path in named):
        return None
    file_of = np.array([index_of[path] for path in named], np.int32)[
        pc.index_in(files, value_set=pa.array(named, pa.string())).to_numpy()
    ]
    row_of = located[ROW].to_numpy()
    place = file_of.astype(np.int64) << 32 | row_of
    keep = np.zeros(len(place), dtype=bool)
    keep[np.unique(place, return_index=True)[1]] = True
    vectored = [
        (at, vector)
        for at in np.unique(file_of).tolist()
        if (vector := added[paths[at]].vector) is not None
    ]
    vectors = deletion_vectors.read_vectors(root, [vector for _, vector in vectored])
    deleted.update(zip((at for at, _ in vectored), vectors, strict=True))
    if vectored:
        # Ascending: files in order, each vector's rows in order.
        gone = np.concatenate(
            [np.int64(at) << 32 | rows for (at, _), rows in zip(vectored, vectors, strict=True)]
        )
        at = np.minimum(np.searchsorted(gone, place), len(gone) - 1)
        keep &= gone[at] != place
    chosen = pa.array(np.flatnonzero(keep))
    return pa.table(
        {
            key: located[key].take(chosen),
            first: located[first].take(chosen),
            "_file": pa.array(file_of[keep]),
            "_row": pa.array(row_of[keep]),
        }
    )


def _decide(
    root: Path,
    paths: list[str],
    source: pa.Table,
    stored: pa.Table,
    key: str,
    order: Sequence[str],
) -> tuple[pa.Table, pa.Array, int]:
    """(the stored rows a source row sorts after: `_file`, `_row`; a mask of the source
    rows to write: those without a stored row of their key, and those that sort after
    one; how many have no stored row).

    Column by column of `order`, as SQL's `s.a > t.a OR (s.a = t.a AND ...)` decides: a
    pair is settled at the first column where its values differ (or one is NULL, which
    never sorts after), and the next column is read for the pairs still equal only."""
    numbered = pa.table(
        {key: source[key], "_source": pa.array(np.arange(source.num_rows, dtype=np.int64))}
    )
    pairs = numbered.join(stored, key, join_type="inner")
    after = np.zeros(pairs.num_rows, dtype=bool)
    open_ = np.ones(pairs.num_rows, dtype=bool)
    for at, column in enumerate(order):
        still = np.flatnonzero(open_)
        if not len(still):
            break
        pending = pairs.take(pa.array(still))
        s = source[column].take(pending["_source"])
        t = (
            pending[column]
            if at == 0
            else _values_at(root, paths, column, pending["_file"], pending["_row"])
        ).cast(s.type)
        after[still[pc.fill_null(pc.greater(s, t), False).to_numpy(zero_copy_only=False)]] = True
        open_[still] = pc.fill_null(pc.equal(s, t), False).to_numpy(zero_copy_only=False)
    beaten = pairs.filter(pa.array(after))
    matched = np.zeros(source.num_rows, dtype=bool)
    matched[pairs["_source"].to_numpy()] = True
    wins = ~matched
    wins[beaten["_source"].to_numpy()] = True
    return beaten.select(["_file", "_row"]), pa.array(wins), int((~matched).sum())


def _values_at(
    root: Path, paths: list[str], column: str, files: pa.ChunkedArray, rows: pa.ChunkedArray
) -> pa.Array:
    """`column`'s value at each (file index, row position) of `files` and `rows`, in
    their order (each file read once, its column only)."""
    file_of, row_of = files.to_numpy(), rows.to_numpy()
    wanted = np.unique(file_of)

    def read(index: int) -> tuple[np.ndarray, pa.Array]:
        at = np.flatnonzero(file_of == index)
        values = pq.ParquetFile(root / paths[index]).read(columns=[column], use_threads=False)
        return at, values.column(0).take(pa.array(row_of[at])).combine_chunks()

    with ThreadPoolExecutor(FILE_READERS) as readers:
        parts = list(readers.map(read, wanted.tolist()))
    placed = np.concatenate([at for at, _ in parts])
    values = pa.concat_arrays([v for _, v in parts])
    return values.take(pa.array(np.argsort(placed)))


def _marks(
    files: pa.Table,
    added: Mapping[str, deletion_vectors.Added],
    deleted: Mapping[int, np.ndarray],
    beaten: pa.Table,
    vectors: deletion_vectors.VectorFile,
) -> list[dict[str, Any]]:
    """A `remove` and an `add` for each file that loses rows: the same file, with a
    vector of the rows it lost before (`deleted`, by file index) and now (written into
    `vectors`). A file that loses its last rows is removed only, as Delta Spark does."""
    if not beaten.num_rows:
        return []
    now = _now_ms()
    actions: list[dict[str, Any]] = []
    file_of, row_of = beaten["_file"].to_numpy(), beaten["_row"].to_numpy()
    order = np.lexsort((row_of, file_of))
    file_of, row_of = file_of[order], row_of[order]
    starts = np.flatnonzero(np.r_[True, file_of[1:] != file_of[:-1]])
    paths, sizes = files["path"].to_pylist(), files["size_bytes"].to_pylist()
    modified, records = files["modification_time"].to_pylist(), files["num_records"].to_pylist()
    for index, rows in zip(file_of[starts].tolist(), np.split(row_of, starts[1:]), strict=True):
        held = added[unquote(paths[index])]
        old = held.vector
        # The rows lost now were live: none is in the old vector.
        positions = rows if old is None else np.sort(np.concatenate([deleted[index], rows]))
        partition = held.partition_values
        size = sizes[index]
        remove = {
            "path": held.path,
            "deletionTimestamp": now,
            "dataChange": True,
            "extendedFileMetadata": True,
            "partitionValues": partition,
            "size": size,
        }
        if old is not None:
            remove["deletionVector"] = old
        actions.append({"remove": remove})
        if len(positions) == records[index]:
            continue
        actions.append(
            {
                "add": {
                    "path": held.path,
                    "partitionValues": partition,
                    "size": size,
                    "modificationTime": modified[index],
                    "dataChange": True,
                    "stats": _loose(held.stats, files, index),
                    "deletionVector": vectors.add(positions),
                }
            }
        )
    return actions


def _loose(stats: str | None, files: pa.Table, index: int) -> str:
    """A marked file's statistics: as they were, but no longer tight (its minimum and
    maximum may belong to rows now deleted), so no reader answers a MIN, MAX or COUNT
    from them alone (Delta Spark marks its own the same way). The log's compact JSON is
    patched as text: parsing and writing it again took a third of the commit's time at
    366 files."""
    if not stats:
        return json.dumps(
            {"numRecords": files["num_records"][index].as_py(), "tightBounds": False},
            separators=(",", ":"),
        )
    text = stats.strip()
    said = text.count('"tightBounds":')
    if said == 0 and text.endswith("}"):
        return f'{text[:-1]}{"," if text != "{}" else ""}"tightBounds":false}}'
    if said == 1 and '"tightBounds":false' in text:
        return text
    if said == 1 and '"tightBounds":true' in text:
        return text.replace('"tightBounds":true', '"tightBounds":false')
    parsed = json.loads(text)
    parsed["tightBounds"] = False
    return json.dumps(parsed, separators=(",", ":"))


def _new_files(
    root: Path,
    winners: pa.Table,
    delta: DeltaTable,
    partition_column: str,
    written: list[Path],
) -> list[dict[str, Any]]:
    """An `add` for each partition's new file of `winners`, written in the table's
    schema (each path appended to `written` once it is there)."""
    if not winners.num_rows:
        return []
    schema = pa.schema(delta.schema().to_arrow())
    data_schema = pa.schema([f for f in schema if f.name != partition_column])
    actions = []
    for value in pc.unique(winners[partition_column]).to_pylist():
        rows = winners.filter(
            pc.is_null(winners[partition_column])
            if value is None
            else pc.equal(winners[partition_column], value)
        )
        text = None if value is None else partition_text(value)
        folder = f"{partition_column}={'__HIVE_DEFAULT_PARTITION__' if text is None else text}"
        relative = f"{folder}/part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        data = rows.select(data_schema.names).cast(data_schema)
        (root / folder).mkdir(exist_ok=True)
        pq.write_table(data, root / relative, compression="snappy")
        written.append(root / relative)
        actions.append(
            {
                "add": {
                    "path": relative,
                    "partitionValues": {partition_column: text},
                    "size": (root / relative).stat().st_size,
                    "modificationTime": _now_ms(),
                    "dataChange": True,
                    "stats": _stats(data),
                }
            }
        )
    return actions


def _stats(data: pa.Table) -> str:
    """Statistics of a new file: its rows and nulls, and bounds of its timestamps with a
    time zone (rounded outwards to the milliseconds the log holds). Bounds of text are left out
    (a reader then just reads the file), and none are claimed tight."""
    minimum, maximum = {}, {}
    for field in data.schema:
        zoned = pa.types.is_timestamp(field.type) and field.type.tz is not None
        if zoned and data[field.name].null_count < data.num_rows:
            low, high = pc.min_max(data[field.name].cast(pa.timestamp("us", "UTC"))).values()
            minimum[field.name] = _iso_ms(low.value, math.floor)
            maximum[field.name] = _iso_ms(high.value, math.ceil)
    return json.dumps(
        {
            "numRecords": data.num_rows,
            "minValues": minimum,
            "maxValues": maximum,
            "nullCount": {name: data[name].null_count for name in data.column_names},
            "tightBounds": False,
        },
        separators=(",", ":"),
    )


def _iso_ms(micros: int, rounding: Any) -> str:
    millis = rounding(micros / 1000)
    seconds, rest = divmod(millis, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{rest:03d}Z"


def _commit(
    commit_info: Mapping[str, Any],
    read_version: int,
    metrics: Mapping[str, int],
    app_transaction: AppTransaction | None,
    actions: list[dict[str, Any]],
) -> bytes:
    info = {
        "timestamp": _now_ms(),
        "operation": "MERGE",
        "operationParameters": dict(commit_info.get("operationParameters", {})),
        "readVersion": read_version,
        "isolationLevel": "Serializable",
        "isBlindAppend": False,
        "operationMetrics": {name: str(value) for name, value in metrics.items()},
        "engineInfo": "lakehouse-marking",
        **{k: v for k, v in commit_info.items() if k != "operationParameters"},
    }
    lines = [{"commitInfo": info}]
    if app_transaction is not None:
        transaction = {
            "appId": app_transaction.app_id,
            "version": app_transaction.version,
            "lastUpdated": _now_ms(),
        }
        lines.append({"txn": transaction})
    lines += actions
    return ("\n".join(json.dumps(line, separators=(",", ":")) for line in lines) + "\n").encode()


def _put(root: Path, version: int, commit: bytes) -> None:
    """The commit as log entry `version`, if no other commit has it: written aside, then
    linked into place, which fails when the entry exists (the put-if-absent delta-rs
    uses on a local disk)."""
    log = root / "_delta_log"
    aside = log / f".{version:020d}.json.{uuid.uuid4().hex}.tmp"
    aside.write_bytes(commit)
    try:
        os.link(aside, log / f"{version:020d}.json")
    except FileExistsError as e:
        aside.unlink(missing_ok=True)
        raise CommitFailedError(
            f"version {version} of {root} was committed by another writer first"
        ) from e
    except BaseException:
        aside.unlink(missing_ok=True)
        raise
    # Committed: nothing may raise now (the caller deletes its files on an error).
    with contextlib.suppress(OSError):
        aside.unlink()


def _now_ms() -> int:
    return int(time.time() * 1000)
