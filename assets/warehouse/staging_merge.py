"""Staging -> dedup -> MERGE: `user_events` keeps, per event, the winning version.

One order decides between versions of an event, inside a batch and across batches alike:
the larger `event_timestamp`, then the larger `ingestion_time`, then the larger
`content_digest` (see `events_source`), then the larger `user_id`, `key_derived` and
`batch_id`. The last three tell apart versions equal in time and content that differ in
a stored column the digest leaves out (the same event from another user, or delivered
in two batches), so which one is kept never depends on which came first: the order is
total over every stored column. A batch is deduplicated by that order, then merged
in one commit: matched and the incoming version wins -> update; matched and the stored one
wins (or they are identical) -> unchanged; not matched -> insert. A delete is a version
like any other, stored as a tombstone (`is_deleted`), also for a key never seen before, so
an older upsert arriving later never brings the event back and a newer one does. The
winner of any set of versions is the same whatever order they arrive in and however often:
replaying batches, or applying them in any order, gives one table.

`user_events` is partitioned by `event_date`, and the MERGE condition names the days it
may touch: the batch's own days and the days the record-level index (`key_index`) names
for the batch's keys. So versions of one event meet however far apart their event times
lie, and the MERGE reads those days, not the table. A matched version that wins moves the
row to its own day. It is the engine's own MERGE: delta-rs's (copy-on-write: a file
holding a replaced row is written again) or Delta Spark's (which marks the replaced rows
with deletion vectors, as the table allows).

Publishes are serialized optimistically: each carries the app transaction `publish` at
the table version its lookup saw plus one, so a publish that another one overtook
between its lookup and its commit is refused (StaleWriteError) and looks up again. A
RESTORE in between records no such transaction and may put a key's old row back in a day
the MERGE does not read; the publish then rebuilds the index, and the rebuild, which
reads every key, keeps one row of each key it finds on two (`OneRowPerKey`), in
a commit of its own. Every rebuild does that, so a key a failed repair, a RESTORE or a
write outside the publish left on two rows is repaired by the next lookup.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from assets.warehouse import key_index
from resources import Lakehouse
from resources.lakehouse import (
    AppTransaction,
    CommitResult,
    StaleWriteError,
    WhenMatchedUpdate,
    WhenNotMatchedInsert,
)
from resources.lakehouse.predicates import SortsAfter, is_in, matches

if TYPE_CHECKING:
    from resources.lakehouse.port import Data, MergeClause

USER_EVENTS = key_index.USER_EVENTS
PUBLISH = "publish"
"""App id of the publishes (see the module's docstring)."""
PUBLISH_ATTEMPTS = 5
T = TypeVar("T")
VERSION_ORDER = (
    "event_timestamp",
    "ingestion_time",
    "content_digest",
    "user_id",
    "key_derived",
    "batch_id",
)
TABLE_SCHEMA = pa.schema(
    [
        pa.field("event_id", pa.string()),
        pa.field("user_id", pa.string()),
        pa.field("event_timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("ingestion_time", pa.timestamp("us", tz="UTC")),
        pa.field("payload", pa.string()),
        pa.field("is_deleted", pa.bool_()),
        pa.field("event_date", pa.date32()),
        pa.field("batch_id", pa.string()),
        pa.field("key_derived", pa.bool_()),
        pa.field("content_digest", pa.string()),
    ]
)
TABLE_COLUMNS = tuple(TABLE_SCHEMA.names)
TABLE_PROPERTIES = {"delta.enableDeletionVectors": "true"}
"""`user_events` is made with deletion vectors, which Delta Spark's MERGE writes: a
version that replaces a stored row of another day (a late version, one years apart)
leaves that row's file in place with the row marked. delta-rs reads them, and its MERGE
(which cannot write them yet: delta-rs issue 4512) copies such a file instead."""
NEWER_WINS: list[MergeClause] = [
    WhenMatchedUpdate(condition=SortsAfter(VERSION_ORDER)),
    WhenNotMatchedInsert(),
]
"""The MERGE's clauses: a matched version replaces the stored row when it sorts after it,
an unmatched one is inserted."""


def deduplicate(events: DataFrame) -> DataFrame:
    """One row per `event_id` of each batch: its winning version."""
    order = Window.partitionBy("batch_id", "event_id").orderBy(
        *(F.col(c).desc() for c in VERSION_ORDER)
    )
    return events.withColumn("_rank", F.row_number().over(order)).where("_rank = 1").drop("_rank")


@dataclass(frozen=True)
class MergedBatch:
    result: CommitResult
    days: tuple[dt.date, ...]
    """The days the MERGE was pinned to: the batch's and those holding its keys."""
    files_in_window: int
    """Files of the pinned days: all the MERGE may read."""
    files_skipped: int
    """Files of other days, which the MERGE never opens."""
    rows_repaired: int = 0
    """Rows the publish's repairs took away: a key's losing rows beside its winning one
    (see `OneRowPerKey`); 0 unless a RESTORE, a failed publish or a write outside the
    publish had left a key more than one row."""


def merge_batch(
    lakehouse: Lakehouse, staged: DataFrame | pa.Table, *, metadata: dict
) -> MergedBatch:
    """MERGE a deduplicated batch of events (`TABLE_COLUMNS`; as Arrow, with each event's
    `key_digest` after them, as `Lakehouse.read_in_write_form` reads a staged batch) into
    `user_events` in one commit, pinned to the batch's event days and the days the index
    names for its keys; then record the batch's keys in the index."""
    digest = F.expr(key_index.KEY_DIGEST.render("spark")).alias("key_digest")
    # The index is read while Spark works out the batch's keys (at 10M pairs, 200 ms of
    # a 600 ms publish; a batch read through delta-rs comes with them); the lookup uses
    # what was read if the index has not moved since.
    index = key_index.current(lakehouse)
    with ThreadPoolExecutor(max_workers=1) as ahead:
        read_ahead = ahead.submit(key_index.read_ahead, lakehouse, index)
        with_digests = (
            staged
            if isinstance(staged, pa.Table)
            else lakehouse.in_write_form(staged.select(*TABLE_COLUMNS, digest))
        )
        source: Data
        if isinstance(with_digests, pa.Table):
            source, digests = with_digests.drop_columns(["key_digest"]), with_digests
        else:
            source = with_digests.drop("key_digest")
            digests = with_digests.select("key_digest", "event_date").toArrow()
        held = read_ahead.result()
    keys = key_index.pairs(digests)
    if not keys.num_rows:
        raise ValueError("a batch without events has nothing to merge")
    batch_days = set(keys["event_date"].to_pylist())
    lakehouse.create(
        USER_EVENTS,
        TABLE_SCHEMA,
        partition_by=["event_date"],
        metadata=metadata,
        table_properties=TABLE_PROPERTIES,
    )
    repair = OneRowPerKey(lakehouse, metadata)

    def publish() -> tuple[int, MergedBatch]:
        seen = key_index.described_version(lakehouse, metadata, repair=repair)
        days = tuple(sorted(batch_days | key_index.days_holding(lakehouse, keys, held)))
        in_window, total = lakehouse.partition_files(USER_EVENTS, where=is_in("event_date", days))
        result = lakehouse.merge(
            USER_EVENTS,
            source,
            on=is_in("t.event_date", days) & matches("event_id"),
            clauses=NEWER_WINS,
            metadata=metadata,
            app_transaction=AppTransaction(PUBLISH, seen + 1),
        )
        return seen, MergedBatch(result, days, in_window, total - in_window)

    seen, merged = _serialized(publish)
    if key_index.rows_moved(lakehouse, seen, merged.result.version):
        # A RESTORE (say) landed between the lookup and the MERGE, which therefore may
        # have left a row of a batch key in a day it did not read. Delta Spark's RESTORE
        # records no app transaction, so it cannot refuse the MERGE; the MERGE's
        # conflict checks cover the days it read only. The index, which no longer
        # covers the table, is rebuilt, and the rebuild repairs every key it finds on
        # two rows.
        _serialized(lambda: key_index.described_version(lakehouse, metadata, repair=repair))
    else:
        key_index.record(
            lakehouse,
            keys,
            before=seen,
            merged=merged.result.version,
            metadata=metadata,
            repair=repair,
        )
    return replace(merged, rows_repaired=repair.rows_removed)


def _serialized(attempt: Callable[[], T]) -> T:
    """`attempt()`, a commit to `user_events` under the publishes' app transaction, made
    again while another publish overtakes it (StaleWriteError), up to `PUBLISH_ATTEMPTS`
    times in all."""
    for made in range(1, PUBLISH_ATTEMPTS + 1):
        try:
            return attempt()
        except StaleWriteError:
            if made == PUBLISH_ATTEMPTS:
                raise
    raise AssertionError("unreachable: the last attempt returns or raises")


@dataclass
class OneRowPerKey:
    """`key_index.Repair` of a publish: of each event in `user_events` whose key hash the
    rebuild found on more than one row, the winning row only is kept. The days of the
    others are rewritten without them, in one commit (the publish's `metadata`, with
    `rows_repaired`) that carries the publishes' app transaction, so a publish since the
    rebuild's version refuses it (StaleWriteError) and the publish looks up again.
    Counts the rows it took away, for the publish's metadata."""

    lakehouse: Lakehouse
    metadata: dict
    rows_removed: int = 0

    def __call__(self, version: int, shared: pa.Table) -> int | None:
        """The repair's commit, from `user_events` at `version` and the index's pairs
        (`shared`) of the key hashes more than one row holds; None when no event holds
        two rows (only hashes of different keys collide)."""
        days = tuple(sorted(set(shared["event_date"].to_pylist())))
        rows = self.lakehouse.read_arrow(
            USER_EVENTS,
            version=version,
            where=is_in("event_date", days),
            columns=TABLE_COLUMNS,
            computed={"key_digest": key_index.KEY_DIGEST},
        )
        rows = rows.append_column("_row", pa.array(range(rows.num_rows), pa.int64()))
        losers = _losers(rows, shared["key_hash"])
        if not len(losers):
            return None
        rewritten = pc.unique(rows.take(losers)["event_date"])
        kept = rows.filter(
            pc.and_(
                pc.is_in(rows["event_date"], value_set=rewritten),
                pc.invert(pc.is_in(rows["_row"], value_set=losers)),
            )
        ).select(list(TABLE_COLUMNS))
        version = self.lakehouse.overwrite(
            USER_EVENTS,
            kept,
            where=is_in("event_date", tuple(sorted(rewritten.to_pylist()))),
            metadata={**self.metadata, "rows_repaired": len(losers)},
            app_transaction=AppTransaction(PUBLISH, version + 1),
        ).version
        self.rows_removed += len(losers)
        return version


def _losers(rows: pa.Table, hashes: pa.Array | pa.ChunkedArray) -> pa.Array:
    """`_row` of each row of `rows` whose key is hashed in `hashes` and that another row
    of the same key beats by `VERSION_ORDER`, or equals (one of identical rows stays)."""
    wanted = hashes.combine_chunks() if isinstance(hashes, pa.ChunkedArray) else hashes
    ours = pc.is_in(key_index.key_hashes(rows["key_digest"]), value_set=wanted)
    ordered = rows.filter(ours).sort_by(
        [("event_id", "ascending"), *((column, "descending") for column in VERSION_ORDER)]
    )
    if ordered.num_rows < 2:
        return pa.array([], pa.int64())
    ids = ordered["event_id"].combine_chunks()
    beaten = pc.equal(ids[1:], ids[:-1])  # the row before it has its key and sorts first
    return ordered["_row"].combine_chunks()[1:].filter(beaten)
