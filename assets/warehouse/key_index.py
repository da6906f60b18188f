"""The record-level index of `user_events`: for every event key, the days (`event_date`
partitions) that may hold its row, so a batch's MERGE reads the days its keys live in
plus its own days, however far apart the versions of one event lie.

Delta has no secondary index (Hudi's record-level index is the model), so this one is a
Delta table of its own, the control table `user_events_key_index` of (`key_hash`,
`event_date`) pairs, written in the process (delta-rs) whatever the engine and on any
store. `key_hash` is a 64-bit hash of the event key (the first 8 bytes of its SHA-256,
`key_hashes`), not the key: a lookup reads the whole index, and 8 bytes per key in place
of a 64-character id (what producers send) take that read at 10M pairs from about 650 to
240 ms. A lookup is a semi-join of the index with the batch's hashes (Arrow's Acero
engine, `days_holding`).

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
  the one the index describes leaves rows in their days (OPTIMIZE, VACUUM, by either
  engine or plain Spark SQL). Anything else (a publish whose append failed, a RESTORE, a
  write outside the publish) and the index is rebuilt from the table's key and day
  columns, with app transaction the version read. A failure between the two commits
  therefore costs one rebuild, never a row.
- A rebuild reads every key, so it also checks the table's own promise, one row per
  event: key hashes that more than one row holds are handed to a repair (the publish's
  `staging_merge.OneRowPerKey`) before the index is written. A RESTORE or a write outside
  the publish that left a key two rows is repaired by the next rebuild; and when the
  repair fails, the index is not written, so the rebuild and the repair come again at
  the next lookup.
- Every `COMPACT_EVERY` appends, the index is rebuilt to one pair per row when it holds
  more than `REBUILD_FACTOR` pairs per row of `user_events`, and compacted (the
  engine's OPTIMIZE) otherwise.
- The app id also names the index's format. An index of an earlier format records no
  transaction under it, so the first lookup rebuilds it, the new columns replacing the
  old in the rebuild's one commit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from resources import Lakehouse
from resources.lakehouse import AppTransaction, StaleWriteError
from resources.lakehouse.predicates import Sha256

USER_EVENTS = "user_events"
KEY_INDEX = "user_events_key_index"
DESCRIBES = "user_events/key_sha256_days"
"""App id under which the index records the version of `user_events` it describes, and
so its format: `SCHEMA`, key hashes taken from `KEY_DIGEST`. A change of either must
change it."""
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
for a batch and DataFusion for a rebuild."""


def key_hashes(digests: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Each key's hash: the first 8 bytes of its SHA-256 digest (`KEY_DIGEST`), read as
    a big-endian signed integer."""
    whole = digests.combine_chunks() if isinstance(digests, pa.ChunkedArray) else digests
    fixed = whole.cast(pa.binary(32))
    words = np.frombuffer(fixed.buffers()[1], dtype=">i8", count=4 * (fixed.offset + len(fixed)))
    return pa.array(words[4 * fixed.offset :: 4].astype(np.int64))


def pairs(digests_and_days: pa.Table) -> pa.Table:
    """The index's (`key_hash`, `event_date`) pairs of rows with their `key_digest`
    (`KEY_DIGEST`) and `event_date`."""
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
    read = _read_pairs(lakehouse, version)
    while (shared := _shared(read)).num_rows:
        repaired = repair(version, shared)
        if repaired is None:
            break  # only hashes of different keys collide
        # The repair took rows away only: when nothing committed before it, the pairs
        # read still cover the table (an extra day for each row it took).
        covered, version = repaired == version + 1, repaired
        if covered:
            break
        read = _read_pairs(lakehouse, version)
    _write(lakehouse, read, version, metadata)
    return version


def _read_pairs(lakehouse: Lakehouse, version: int) -> pa.Table:
    return pairs(
        lakehouse.in_process().read_arrow(
            USER_EVENTS,
            version=version,
            columns=["event_date"],
            computed={"key_digest": KEY_DIGEST},
        )
    )


def _shared(held: pa.Table) -> pa.Table:
    """The pairs of the key hashes that more than one pair holds (sorted, 10M hashes take
    0.9 s, where a hash table took 2 s)."""
    hashes = held["key_hash"].to_numpy()
    ordered = np.sort(hashes)
    twice = ordered[1:][ordered[1:] == ordered[:-1]]
    if not len(twice):
        return held.slice(0, 0)
    return held.filter(pc.is_in(held["key_hash"], value_set=pa.array(np.unique(twice))))


def _write(
    lakehouse: Lakehouse, written: pa.Table, version: int, metadata: Mapping[str, Any]
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
            written,
            metadata={**metadata, "index_rebuilt_from": version},
            # The same version again (a rebuild that only shrinks the index) keeps the
            # app transaction the table records.
            app_transaction=None if described == version else AppTransaction(DESCRIBES, version),
            replace_schema=held is not None and [c.name for c in held.columns] != SCHEMA.names,
        )
    except StaleWriteError:
        pass  # a concurrent publish or rebuild already describes this version or a later one


@dataclass(frozen=True)
class Held:
    """An index as it was: its version and the version of `user_events` it described
    (both None: there was none), and its pairs once read (`read`)."""

    version: int | None
    describes: int | None
    pairs: pa.Table | None = None

    def same_index(self, other: Held) -> bool:
        """Whether both are one version of one index. A dropped index made again counts
        its versions from 0, but describes an older version of `user_events` (it is
        dropped only when it described a newer one than the table now has)."""
        return (self.version, self.describes) == (other.version, other.describes)


def current(lakehouse: Lakehouse) -> Held:
    """The index as it is now, its pairs not read."""
    index = lakehouse.in_process()
    version = index.version(KEY_INDEX)
    return Held(version, None if version is None else _described(lakehouse))


def read(lakehouse: Lakehouse, held: Held) -> Held:
    """`held` with its pairs (two fixed-width columns, read whole)."""
    if held.version is None:
        return held
    index = lakehouse.in_process()
    return replace(
        held, pairs=index.read_arrow(KEY_INDEX, version=held.version, columns=SCHEMA.names)
    )


def read_ahead(lakehouse: Lakehouse, held: Held) -> Held | None:
    """`read(held)` for a lookup to come, unless the lookup will rebuild the index first
    (there is none, or one of an earlier format, which describes nothing)."""
    return None if held.describes is None else read(lakehouse, held)


def days_holding(lakehouse: Lakehouse, keys: pa.Table, read_ahead: Held | None = None) -> frozenset:
    """The days the index names for any of the batch's pairs `keys` (`pairs`): the
    index's current pairs (`read_ahead`, when the index has not moved since it was read)
    semi-joined with the batch's hashes, where a long IN list of hashes cost DataFusion
    140 ms to plan at 10k keys."""
    if not keys.num_rows:
        return frozenset()
    now = current(lakehouse)
    held = read_ahead if read_ahead and read_ahead.same_index(now) else read(lakehouse, now)
    if held.pairs is None:
        return frozenset()
    found = held.pairs.join(keys.select(["key_hash"]), "key_hash", join_type="left semi")
    return frozenset(pc.unique(found["event_date"]).to_pylist())


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
    asks first): the batch's pairs (`keys`) appended. Skipped when the publish committed
    nothing, or another writer recorded first."""
    if merged <= before:
        return
    index = lakehouse.in_process()
    try:
        appended = index.append(
            KEY_INDEX,
            keys.select(SCHEMA.names),
            metadata=metadata,
            app_transaction=AppTransaction(DESCRIBES, merged),
        )
    except StaleWriteError:
        return
    if appended.version % COMPACT_EVERY:
        return
    # Every COMPACT_EVERY appends: the index rebuilt once it outgrew the table, else
    # compacted. (The table's rows are counted by a query: with deletion vectors its log
    # cannot count them.)
    held = index.count(KEY_INDEX)
    if held > REBUILD_FACTOR * lakehouse.count(USER_EVENTS, version=merged):
        rebuild(lakehouse, merged, metadata, repair=repair)
    else:
        index.compact(KEY_INDEX, metadata=metadata)
