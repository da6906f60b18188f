"""The record-level index of `user_events`: for every event key, the days (`event_date`
partitions) that may hold its row, so a batch's MERGE reads the days its keys live in
plus its own days, however far apart the versions of one event lie.

Delta has no secondary index (Hudi's record-level index is the model), so this one is
written here, as a control table `user_events_key_index` of (`key_hash`, `event_date`)
pairs, written in the process (delta-rs) whatever the engine. `key_hash` is a 64-bit hash
of the event key (`key_hashes`), not the key: a lookup scans the index, and 8 bytes per
key in place of a 64-character id (what producers send) takes that scan at 10M pairs
from about 650 to 240 ms.

What it promises: the day holding each key's row in `user_events` is among the days of
the key's hash. It may hold more (a key whose row moved keeps its old day until the
index is rebuilt; two keys whose hashes collide share their days), which costs a MERGE
an extra day, never a wrong result.

How it keeps that promise across failures and other writers: the index records, as the
Delta app transaction `DESCRIBES`, the version of `user_events` it describes.
- After a publish commits version m of `user_events`, the batch's keys and days are
  appended to the index with app transaction m. A batch's key ends in its own day or in
  the day it already had, so every row stays covered.
- Before a lookup, `described_version` checks that every commit of `user_events` after
  the one the index describes leaves rows where they were (OPTIMIZE, VACUUM). Anything
  else (a publish whose append failed, a RESTORE, a write outside the publish) and the
  index is rebuilt from the table's key and day columns, with app transaction the version
  read. A failure between the two commits therefore costs one rebuild, never a row.
- A rebuild reads every key, so it also checks the table's own promise, one row per
  event: key hashes that more than one row holds are handed to a repair (the publish's
  `staging_merge.OneRowPerKey`) before the index is written. A RESTORE or a write outside the
  publish that left a key two rows is repaired by the next rebuild; and when the repair
  fails, the index is not written, so the rebuild and the repair come again at the next
  lookup.
- When the index holds more than `REBUILD_FACTOR` pairs per row of `user_events`, it is
  rebuilt to one pair per row; every `COMPACT_EVERY` appends its files are bin-packed.
- The app id also names the index's format. An index of an earlier format (event ids in
  place of hashes) records no transaction under it, so the first lookup rebuilds it, the
  new columns replacing the old in the rebuild's one commit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from resources import Lakehouse
from resources.lakehouse import AppTransaction, StaleWriteError
from resources.lakehouse.predicates import Sha256, is_in

USER_EVENTS = "user_events"
KEY_INDEX = "user_events_key_index"
DESCRIBES = "user_events/key_sha256"
"""App id under which the index records the version of `user_events` it describes, and
so its format: key hashes taken from `KEY_DIGEST`. A change of the hash must change it."""
SCHEMA = pa.schema([pa.field("key_hash", pa.int64()), pa.field("event_date", pa.date32())])
ROWS_STAY = frozenset({"OPTIMIZE", "VACUUM START", "VACUUM END"})
"""Operations of `user_events` after which every row is in the day it was in before."""
REBUILD_FACTOR = 2
COMPACT_EVERY = 32
Repair = Callable[[int, pa.Table], int | None]
"""Given a version of `user_events` and the index's pairs, at that version, of the key
hashes more than one row holds: keeps each key's winning row, in one commit whose version
it returns, or returns None when no key holds two rows (only hashes of different keys
collide)."""
KEY_DIGEST = Sha256("event_id")
"""What a key's hash is taken from: the SHA-256 of its UTF-8 bytes, which Spark computes
for a batch and delta-rs for a rebuild (both in native code, where hashing 10M keys one
by one in Python took 6 s of a 12 s rebuild)."""


def key_hashes(digests: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Each key's hash: the first 8 bytes of its SHA-256 digest (`KEY_DIGEST`), read as
    a big-endian signed integer."""
    whole = digests.combine_chunks() if isinstance(digests, pa.ChunkedArray) else digests
    fixed = whole.cast(pa.binary(32))
    words = np.frombuffer(fixed.buffers()[1], dtype=">i8", count=4 * (fixed.offset + len(fixed)))
    return pa.array(words[4 * fixed.offset :: 4].astype(np.int64))


def batch_pairs(events: DataFrame) -> pa.Table:
    """The index's (`key_hash`, `event_date`) pairs of a batch of events."""
    digests = events.select(
        F.expr(KEY_DIGEST.render("spark")).alias("key_digest"), "event_date"
    ).toArrow()
    return _pairs(digests)


def _pairs(digests_and_days: pa.Table) -> pa.Table:
    return pa.table(
        [
            key_hashes(digests_and_days["key_digest"]),
            digests_and_days["event_date"].cast(pa.date32()),
        ],
        schema=SCHEMA,
    )


def described_version(lakehouse: Lakehouse, metadata: Mapping[str, Any], *, repair: Repair) -> int:
    """The current version of `user_events` (which must exist), after making sure the
    index covers it: rebuilt (`rebuild`, with `repair`) when a commit since the version
    it describes may have put a row in a day the index does not name."""
    current = lakehouse.version(USER_EVENTS)
    if current is None:
        raise ValueError(f"{USER_EVENTS} does not exist: nothing to index")
    described = _described(lakehouse)
    if described is None or not rows_stayed(lakehouse, described, current):
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
    """The index made anew from `user_events` at `version`, one pair per row, once
    `repair` kept one row of every key that more than one row holds; returns the version
    the index describes: `version`, or the repair's commit."""
    pairs = _read_pairs(lakehouse, version)
    while (shared := _shared(pairs)).num_rows:
        repaired = repair(version, shared)
        if repaired is None:
            break  # only hashes of different keys collide
        # The repair took rows away only: when nothing committed before it, the pairs
        # read still cover the table (an extra day for each row it took).
        covered, version = repaired == version + 1, repaired
        if covered:
            break
        pairs = _read_pairs(lakehouse, version)
    _write(lakehouse, pairs, version, metadata)
    return version


def _read_pairs(lakehouse: Lakehouse, version: int) -> pa.Table:
    return _pairs(
        lakehouse.read_arrow(
            USER_EVENTS,
            version=version,
            columns=["event_date"],
            computed={"key_digest": KEY_DIGEST},
        )
    )


def _shared(pairs: pa.Table) -> pa.Table:
    """The pairs of the key hashes that more than one pair holds (sorted, 10M hashes take
    0.9 s, where a hash table took 2 s)."""
    hashes = pairs["key_hash"].to_numpy()
    ordered = np.sort(hashes)
    twice = ordered[1:][ordered[1:] == ordered[:-1]]
    if not len(twice):
        return pairs.slice(0, 0)
    return pairs.filter(pc.is_in(pairs["key_hash"], value_set=pa.array(np.unique(twice))))


def _write(
    lakehouse: Lakehouse, pairs: pa.Table, version: int, metadata: Mapping[str, Any]
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
            pairs,
            metadata={**metadata, "index_rebuilt_from": version},
            # The same version again (a rebuild that only shrinks the index) keeps the
            # app transaction the table records.
            app_transaction=None if described == version else AppTransaction(DESCRIBES, version),
            replace_schema=held is not None and [c.name for c in held.columns] != SCHEMA.names,
        )
    except StaleWriteError:
        pass  # a concurrent publish or rebuild already describes this version or a later one


def days_holding(lakehouse: Lakehouse, hashes: pa.Array | pa.ChunkedArray) -> set:
    """The days the index names for any of the key hashes `hashes` (see `batch_pairs`)."""
    if not lakehouse.exists(KEY_INDEX) or not len(hashes):
        return set()
    found = lakehouse.read_arrow(
        KEY_INDEX, where=is_in("key_hash", hashes.to_pylist()), columns=["event_date"]
    )
    return set(pc.unique(found["event_date"]).to_pylist())


def record(
    lakehouse: Lakehouse,
    pairs: pa.Table,
    *,
    before: int,
    merged: int,
    metadata: Mapping[str, Any],
    repair: Repair,
) -> None:
    """After a publish moved `user_events` from version `before` to `merged`, with every
    commit in between leaving rows where they were (`rows_moved`, which the publish
    asks first): the batch's (`key_hash`, `event_date`) pairs (`batch_pairs`) appended.
    Skipped when the publish committed nothing, or another writer recorded first."""
    if merged <= before:
        return
    index = lakehouse.in_process()
    try:
        appended = index.append(
            KEY_INDEX,
            pairs,
            metadata=metadata,
            app_transaction=AppTransaction(DESCRIBES, merged),
        )
    except StaleWriteError:
        return
    pairs_held = index.count_from_log(KEY_INDEX)
    rows = lakehouse.count_from_log(USER_EVENTS, version=merged)
    if pairs_held is not None and rows is not None and pairs_held > REBUILD_FACTOR * rows:
        rebuild(lakehouse, merged, metadata, repair=repair)
    elif appended.version % COMPACT_EVERY == 0:
        index.compact(KEY_INDEX, metadata=metadata)
