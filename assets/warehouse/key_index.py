"""The record-level index of `user_events`: for every row, where it lies (its day, its
file and its position in the file) and the time that orders its versions first, so a
batch's publish finds the stored rows of its keys without reading a data file, however
far apart the versions of one event lie: its MERGE reads the days those rows are in plus
the batch's own, and where the engine marks rows (`resources/lakehouse/marking.py`) it
marks them at their positions.

Delta has no secondary index (Hudi's record-level index is the model), so this one is
written here, as a control table `user_events_key_index`, written in the process
(delta-rs) whatever the engine. A row's key is held as 128 bits of its SHA-256
(`key_hash`, the first 8 bytes, which a lookup filters on, and `key_check`, the next 8):
a lookup scans the index, and 8 bytes per key in place of a 64-character id (what
producers send) take that scan at 10M entries from about 650 to 240 ms, while two keys
sharing 128 bits is too unlikely to guard against. A row's file is a 64-bit hash of its
path (`file_hash`). On an object store, whose files this process does not read one by
one, the index holds keys and days only (`file`, `row` and `event_timestamp` null).

What it promises: every live row of `user_events` at the version it describes has an
entry with its day and, on a local disk, its file and position. It may hold more: entries
of rows deleted or moved since (their file has left the table, or its deletion vector
marks them), which a lookup leaves out, and hash twins, which cost a MERGE a day, never a
wrong result.

How it keeps that promise across failures and other writers: the index records, as the
Delta app transaction `DESCRIBES`, the version of `user_events` it describes.
- After a publish commits version m of `user_events`, the rows of the files that commit
  brought in (the batch's winners, and any file a MERGE wrote again) are appended to the
  index with app transaction m; on an object store, the batch's keys and days.
- Before a lookup, `described_version` checks that every commit of `user_events` after
  the one the index describes leaves rows in their days (OPTIMIZE, VACUUM), and indexes
  the files they brought in (a compaction's). Anything else (a publish whose append
  failed, a RESTORE, a write outside the publish) and the index is rebuilt from the
  table's rows, with app transaction the version read. A failure between the two
  commits therefore costs one rebuild, never a row.
- A rebuild reads every key, so it also checks the table's own promise, one row per
  event: key hashes that more than one row holds are handed to a repair (the publish's
  `staging_merge.OneRowPerKey`) before the index is written. A RESTORE or a write outside the
  publish that left a key two rows is repaired by the next rebuild; and when the repair
  fails, the index is not written, so the rebuild and the repair come again at the next
  lookup.
- When the index holds more than `REBUILD_FACTOR` entries per row of `user_events`, or
  its appended entries (`TIER` 1) pass one per `APPENDED_SHARE` rows, it is rebuilt to one
  entry per row; once tier 1 holds `COMPACT_EVERY` files, the next append merges them
  into one (a commit under the same app transaction, so it is refused like an append).
- The app id also names the index's format. An index of an earlier format (without
  positions, or with event ids in place of hashes) records no transaction under it, so
  the first lookup rebuilds it, the new columns replacing the old in the rebuild's one
  commit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from event_lines.digests import sha256
from pyspark.sql import functions as F

from resources import Lakehouse
from resources.lakehouse import AppTransaction, StaleWriteError
from resources.lakehouse.frames import is_arrow
from resources.lakehouse.located import PATH, ROW
from resources.lakehouse.predicates import Sha256, eq, is_in
from resources.object_store import is_object_store

if TYPE_CHECKING:
    from resources.lakehouse.port import Data

USER_EVENTS = "user_events"
KEY_INDEX = "user_events_key_index"
DESCRIBES = "user_events/key_sha256_places"
"""App id under which the index records the version of `user_events` it describes, and
so its format: entries of `SCHEMA`, key hashes taken from `KEY_DIGEST`. A change of
either must change it."""
UTC_MICROS = pa.timestamp("us", tz="UTC")
SCHEMA = pa.schema(
    [
        pa.field("key_hash", pa.int64()),
        pa.field("key_check", pa.int64()),
        pa.field("event_date", pa.date32()),
        pa.field("file", pa.int64()),
        pa.field("row", pa.int64()),
        pa.field("event_timestamp", UTC_MICROS),
    ]
)
ROW_COLUMNS = ("event_id", "event_timestamp", "event_date")
"""What an entry is made from: a row's key, the time that orders its versions first,
and its day."""
ROWS_STAY = frozenset({"OPTIMIZE", "VACUUM START", "VACUUM END"})
"""Operations of `user_events` after which every row is in the day it was in before."""
TIER = "tier"
"""The index's partition column: 0 holds the rebuild's entries, 1 those appended since.
Every file holds its entries sorted by `key_hash`, written addressable, so a lookup finds
a key in each file by binary search and reads its entry alone
(`resources/lakehouse/addressable.py`)."""
STORED = pa.schema([*SCHEMA, pa.field(TIER, pa.int32())])
REBUILD_FACTOR = 2
"""Entries per row of `user_events` past which the index is rebuilt: the entries of rows
replaced since the last rebuild are still held."""
APPENDED_SHARE = 4
APPENDED_FLOOR = 250_000
"""Past one appended entry for `APPENDED_SHARE` rows of `user_events` (and past
`APPENDED_FLOOR` entries), the index is rebuilt (tier 1 goes into tier 0), so merging
tier 1 stays a fraction of a rebuild."""
COMPACT_EVERY = 32
"""Files of tier 1 from which the next append merges tier 1 into one sorted file."""
Repair = Callable[[int, pa.Table], int | None]
"""Given a version of `user_events` and the index's entries, at that version, of the key
hashes more than one row holds: keeps each key's winning row, in one commit whose version
it returns, or returns None when no key holds two rows (only hashes of different keys
collide)."""
KEY_DIGEST = Sha256("event_id")
"""What a key's hash is taken from: the SHA-256 of its UTF-8 bytes, which Spark computes
for a batch, and this process for a rebuild (`event_lines.digests`, native, where
hashing 10M keys one by one in Python took 6 s)."""


def key_hashes(digests: pa.Array | pa.ChunkedArray, *, word: int = 0) -> pa.Array:
    """Each key's hash: the 8 bytes at `word` (0: `key_hash`, 1: `key_check`) of its
    SHA-256 digest (`KEY_DIGEST`), read as a big-endian signed integer."""
    whole = digests.combine_chunks() if isinstance(digests, pa.ChunkedArray) else digests
    fixed = whole.cast(pa.binary(32))
    words = np.frombuffer(fixed.buffers()[1], dtype=">i8", count=4 * (fixed.offset + len(fixed)))
    return pa.array(words[4 * fixed.offset + word :: 4].astype(np.int64))


def file_hash(path: str) -> int:
    """The `file` of an entry: the first 8 bytes of the SHA-256 of its file's path (as
    `located.PATH` holds it), big-endian and signed."""
    return int.from_bytes(hashlib.sha256(path.encode()).digest()[:8], "big", signed=True)


def batch_keys(events: Data) -> pa.Table:
    """A batch's `event_id`, `key_hash`, `key_check` and `event_date`: hashed here when
    the batch is Arrow, by Spark when it is a DataFrame."""
    if is_arrow(events):
        rows = events if isinstance(events, pa.Table) else events.read_all()
        digests = sha256(rows["event_id"])
        ids, days = rows["event_id"], rows["event_date"]
    else:
        read = events.select(
            "event_id", F.expr(KEY_DIGEST.render("spark")).alias("key_digest"), "event_date"
        ).toArrow()
        digests, ids, days = read["key_digest"], read["event_id"], read["event_date"]
    return pa.table(
        {
            "event_id": ids,
            "key_hash": key_hashes(digests),
            "key_check": key_hashes(digests, word=1),
            "event_date": days.cast(pa.date32()),
        }
    )


def _unplaced(keys_and_days: pa.Table) -> pa.Table:
    """Entries of keys and days without a place (an object store's)."""
    rows = keys_and_days.num_rows
    return pa.table(
        [
            keys_and_days["key_hash"],
            keys_and_days["key_check"],
            keys_and_days["event_date"].cast(pa.date32()),
            pa.nulls(rows, pa.int64()),
            pa.nulls(rows, pa.int64()),
            pa.nulls(rows, UTC_MICROS),
        ],
        schema=SCHEMA,
    )


def placed(rows: pa.Table) -> pa.Table:
    """Entries of rows read where they lie (`Lakehouse.located_rows` of `ROW_COLUMNS`)."""
    if not rows.num_rows:
        return SCHEMA.empty_table()
    digests = sha256(rows["event_id"])
    paths = rows[PATH].combine_chunks()
    if not pa.types.is_dictionary(paths.type):
        paths = paths.dictionary_encode()
    hashes = np.array([file_hash(p) for p in paths.dictionary.to_pylist()], np.int64)
    return pa.table(
        [
            key_hashes(digests),
            key_hashes(digests, word=1),
            rows["event_date"].cast(pa.date32()),
            pa.array(hashes[paths.indices.to_numpy()]),
            rows[ROW].cast(pa.int64()),
            rows["event_timestamp"].cast(UTC_MICROS),
        ],
        schema=SCHEMA,
    )


def described_version(lakehouse: Lakehouse, metadata: Mapping[str, Any], *, repair: Repair) -> int:
    """The current version of `user_events` (which must exist), after making sure the
    index covers it: the files of compactions since the version it describes indexed,
    or the index rebuilt (`rebuild`, with `repair`) when a commit since may have put a
    row where the index does not say."""
    current = lakehouse.version(USER_EVENTS)
    if current is None:
        raise ValueError(f"{USER_EVENTS} does not exist: nothing to index")
    described = _described(lakehouse)
    if described is None or not rows_stayed(lakehouse, described, current):
        return rebuild(lakehouse, current, metadata, repair=repair)
    if described < current and not _index_added(lakehouse, described, current, metadata):
        return rebuild(lakehouse, current, metadata, repair=repair)
    return current


def _described(lakehouse: Lakehouse) -> int | None:
    index = lakehouse.in_process()
    return index.app_transaction_version(KEY_INDEX, DESCRIBES) if index.exists(KEY_INDEX) else None


def rows_stayed(lakehouse: Lakehouse, after: int, upto: int) -> bool:
    """Whether every commit of `user_events` in (after, upto] left each row in its day."""
    if after > upto:
        return False  # the table was dropped and made again
    if after == upto:
        return True
    newest = lakehouse.version(USER_EVENTS) or upto
    return all(
        entry.operation.upper() in ROWS_STAY
        for entry in lakehouse.history(USER_EVENTS, limit=newest - after)
        if after < entry.version <= upto
    )


def rows_moved(lakehouse: Lakehouse, before: int, merged: int) -> bool:
    """Whether a commit between a publish's lookup at version `before` and its commit
    `merged` may have moved rows (a RESTORE, a write outside the publish): then the
    index no longer covers the table, and the publish's MERGE may have missed a row."""
    return merged > before and not rows_stayed(lakehouse, before, merged - 1)


def rebuild(
    lakehouse: Lakehouse, version: int, metadata: Mapping[str, Any], *, repair: Repair
) -> int:
    """The index made anew from `user_events` at `version`, one entry per row, once
    `repair` kept one row of every key that more than one row holds; returns the version
    the index describes: `version`, or the repair's commit."""
    entries = _read_entries(lakehouse, version)
    while (shared := _shared(entries)).num_rows:
        repaired = repair(version, shared)
        if repaired is None:
            break  # only hashes of different keys collide
        # The repair wrote its days again: their rows lie in new files.
        version = repaired
        entries = _read_entries(lakehouse, version)
    _write(lakehouse, entries, version, metadata)
    return version


def _read_entries(lakehouse: Lakehouse, version: int) -> pa.Table:
    """The entries of every row of `user_events` at `version`, sorted by `key_hash`."""
    return _sorted(_entries_at(lakehouse, version))


def _entries_at(lakehouse: Lakehouse, version: int) -> pa.Table:
    if not is_object_store(lakehouse.root):
        rows = lakehouse.located_rows(USER_EVENTS, version=version, columns=ROW_COLUMNS)
        if rows is not None:
            return placed(rows)
    read = lakehouse.read_arrow(
        USER_EVENTS,
        version=version,
        columns=["event_date"],
        computed={"key_digest": KEY_DIGEST},
    )
    return _unplaced(
        pa.table(
            {
                "key_hash": key_hashes(read["key_digest"]),
                "key_check": key_hashes(read["key_digest"], word=1),
                "event_date": read["event_date"],
            }
        )
    )


def _index_added(lakehouse: Lakehouse, after: int, upto: int, metadata: Mapping[str, Any]) -> bool:
    """The rows of the files the commits of `user_events` in (after, upto] brought in,
    appended to the index with app transaction `upto` (nothing to append on an object
    store, where the index names days only, and those commits left rows in their days).
    False when the log no longer says which files those are: the index needs a rebuild."""
    if is_object_store(lakehouse.root):
        entries = SCHEMA.empty_table()
    else:
        rows = lakehouse.located_rows(USER_EVENTS, version=upto, columns=ROW_COLUMNS, after=after)
        if rows is None:
            return False
        entries = placed(rows)
    _append(lakehouse, entries, upto, metadata)
    return True


def _shared(entries: pa.Table) -> pa.Table:
    """The entries (sorted by `key_hash`) of the key hashes more than one entry holds."""
    hashes = entries["key_hash"].to_numpy()
    again = np.flatnonzero(hashes[1:] == hashes[:-1])
    if not len(again):
        return entries.slice(0, 0)
    return entries.take(pa.array(np.union1d(again, again + 1)))


def _sorted(entries: pa.Table) -> pa.Table:
    """`entries` sorted by `key_hash` (a sort of 10M takes 1.3 s: done once a rebuild)."""
    hashes = entries["key_hash"].to_numpy()
    if bool(np.all(hashes[:-1] <= hashes[1:])):
        return entries
    return entries.take(pa.array(np.argsort(hashes, kind="stable")))


def _write(
    lakehouse: Lakehouse, entries: pa.Table, version: int, metadata: Mapping[str, Any]
) -> None:
    described = _described(lakehouse)
    if described is not None and described > version:
        lakehouse.drop(KEY_INDEX)  # it described a table that no longer exists
        described = None
    index = lakehouse.in_process()
    held = index.table_facts(KEY_INDEX)
    try:
        index.overwrite(
            KEY_INDEX,
            _tiered(entries, 0),
            metadata={**metadata, "index_rebuilt_from": version},
            partition_by=[TIER],
            # The same version again (a rebuild that only shrinks the index) keeps the
            # app transaction the table records.
            app_transaction=None if described == version else AppTransaction(DESCRIBES, version),
            replace_schema=held is not None and [c.name for c in held.columns] != STORED.names,
            addressable=True,
        )
    except StaleWriteError:
        pass  # a concurrent publish or rebuild already describes this version or a later one


def _tiered(entries: pa.Table, tier: int) -> pa.Table:
    """`entries` sorted by `key_hash`, in `tier`."""
    return _sorted(entries).append_column(TIER, pa.array(np.full(entries.num_rows, tier, np.int32)))


@dataclass(frozen=True)
class Found:
    """What the index says of a batch's keys (`locate`)."""

    days: frozenset
    """The days holding their rows."""
    located: pa.Table | None
    """Their live rows' places, as `NewestWins.located` takes them: `event_id`,
    `event_timestamp`, `located.PATH`, `located.ROW`. None where the index holds no
    places (an object store)."""


def locate(lakehouse: Lakehouse, keys: pa.Table, version: int) -> Found:
    """The rows of `user_events` at `version` (which the index describes) holding any of
    the batch's keys (`batch_keys`)."""
    if not lakehouse.exists(KEY_INDEX) or not keys.num_rows:
        return Found(frozenset(), None)
    entries = lakehouse.read_arrow(
        KEY_INDEX, where=is_in("key_hash", keys["key_hash"].to_pylist()), columns=SCHEMA.names
    ).join(keys.select(["key_hash", "key_check", "event_id"]), ["key_hash", "key_check"])
    paths = None if entries["file"].null_count else lakehouse.data_paths(USER_EVENTS, version)
    if paths is None:
        return Found(frozenset(pc.unique(entries["event_date"]).to_pylist()), None)
    by_hash = {file_hash(path): path for path in paths}
    live = entries.filter(pc.is_in(entries["file"], value_set=pa.array(list(by_hash), pa.int64())))
    located = pa.table(
        {
            "event_id": live["event_id"],
            "event_timestamp": live["event_timestamp"],
            PATH: pa.array([by_hash[h] for h in live["file"].to_pylist()], pa.string()),
            ROW: live["row"],
        }
    )
    return Found(frozenset(pc.unique(live["event_date"]).to_pylist()), located)


def record(
    lakehouse: Lakehouse,
    keys: pa.Table,
    *,
    before: int,
    merged: int,
    metadata: Mapping[str, Any],
    repair: Repair,
) -> None:
    """After a publish moved `user_events` from version `before` to `merged`, with every
    commit in between leaving rows where they were (`rows_moved`, which the publish
    asks first): the rows of the files those commits brought in appended (on an object
    store, the batch's keys and days, `batch_keys`). Skipped when the publish committed
    nothing, or another writer recorded first."""
    if merged <= before:
        return
    if is_object_store(lakehouse.root):
        entries = _unplaced(keys)
    else:
        rows = lakehouse.located_rows(
            USER_EVENTS, version=merged, columns=ROW_COLUMNS, after=before
        )
        if rows is None:
            rebuild(lakehouse, merged, metadata, repair=repair)
            return
        entries = placed(rows)
    if not _append(lakehouse, entries, merged, metadata):
        return
    index = lakehouse.in_process()
    held = index.count_from_log(KEY_INDEX)
    appended = index.count_from_log(KEY_INDEX, where=eq(TIER, 1))
    rows_now = lakehouse.count_from_log(USER_EVENTS, version=merged)
    if held is None or appended is None or rows_now is None:
        return
    if held > REBUILD_FACTOR * rows_now or appended > max(
        rows_now // APPENDED_SHARE, APPENDED_FLOOR
    ):
        rebuild(lakehouse, merged, metadata, repair=repair)


def _append(
    lakehouse: Lakehouse, entries: pa.Table, version: int, metadata: Mapping[str, Any]
) -> bool:
    """`entries` added to tier 1 of the index, which then describes `version`: appended,
    or, once tier 1 holds `COMPACT_EVERY` files, merged with tier 1's entries into one
    sorted file in the same commit. False when another writer recorded `version` or a
    later one first (the app transaction refuses this commit)."""
    index = lakehouse.in_process()
    tier_files = (
        index.partition_files(KEY_INDEX, where=eq(TIER, 1))[0] if index.exists(KEY_INDEX) else 0
    )
    transaction = AppTransaction(DESCRIBES, version)
    try:
        if tier_files + 1 < COMPACT_EVERY:
            index.append(
                KEY_INDEX,
                _tiered(entries, 1),
                metadata=metadata,
                partition_by=[TIER],
                app_transaction=transaction,
                addressable=True,
            )
        else:
            held = index.read_arrow(KEY_INDEX, where=eq(TIER, 1), columns=SCHEMA.names)
            index.overwrite(
                KEY_INDEX,
                _tiered(pa.concat_tables([held, entries.cast(SCHEMA)]), 1),
                where=eq(TIER, 1),
                metadata={**metadata, "index_tier_merged": tier_files + 1},
                partition_by=[TIER],
                app_transaction=transaction,
                addressable=True,
            )
    except StaleWriteError:
        return False
    return True
