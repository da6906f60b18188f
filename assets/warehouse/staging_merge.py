"""Staging -> dedup -> MERGE: `user_events` keeps, per event, the winning version.

One order decides between versions of an event, inside a batch and across batches alike:
the larger `event_timestamp`, then the larger `ingestion_time`, then the larger
`content_digest` (see `events_source`). A batch is deduplicated by that order, then merged
in one commit: matched and the incoming version wins -> update; matched and the stored one
wins (or they are identical) -> unchanged; not matched -> insert. A delete is a version
like any other, stored as a tombstone (`is_deleted`), also for a key never seen before, so
an older upsert arriving later never brings the event back and a newer one does. The
winner of any set of versions is the same whatever order they arrive in and however often:
replaying batches, or applying them in any order, gives one table.

`user_events` is partitioned by `event_date`, and the MERGE condition carries the batch's
date bounds widened by `window_days` on both sides, so the MERGE reads those days, not the
table. Versions of one event are matched within that window: a derived key fixes the
event's day (the event time is part of it); an `event_id` whose versions carry event times
further apart than the window is stored once per version outside it. A matched version
that wins moves the row to its own day.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from resources import Lakehouse
from resources.lakehouse import (
    AppTransaction,
    CommitResult,
    WhenMatchedUpdate,
    WhenNotMatchedInsert,
)
from resources.lakehouse.predicates import SortsAfter, between, from_source, matches

USER_EVENTS = "user_events"
VERSION_ORDER = ("event_timestamp", "ingestion_time", "content_digest")
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


def deduplicate(events: DataFrame) -> DataFrame:
    """One row per `event_id`: its winning version."""
    order = Window.partitionBy("event_id").orderBy(*(F.col(c).desc() for c in VERSION_ORDER))
    return events.withColumn("_rank", F.row_number().over(order)).where("_rank = 1").drop("_rank")


@dataclass(frozen=True)
class MergedBatch:
    result: CommitResult
    first_day: dt.date
    last_day: dt.date
    files_in_window: int
    """Files of the pinned days: all the MERGE may read."""
    files_skipped: int
    """Files of other days, which the MERGE never opens."""


def merge_batch(
    lakehouse: Lakehouse,
    staged: DataFrame,
    *,
    window_days: int,
    metadata: dict,
    app_transaction: AppTransaction | None = None,
) -> MergedBatch:
    """MERGE a deduplicated batch of events into `user_events` in one commit, pinned to
    the batch's event dates widened by `window_days`."""
    first_day, last_day = staged.agg(F.min("event_date"), F.max("event_date")).first()
    if first_day is None:
        raise ValueError("a batch without events has nothing to merge")
    window = dt.timedelta(days=window_days)
    first_day, last_day = first_day - window, last_day + window
    lakehouse.create(USER_EVENTS, TABLE_SCHEMA, partition_by=["event_date"], metadata=metadata)
    days = between("event_date", first_day, last_day)
    in_window, total = lakehouse.partition_files(USER_EVENTS, where=days)
    every_column = from_source(TABLE_COLUMNS)
    result = lakehouse.merge(
        USER_EVENTS,
        staged.select(*TABLE_COLUMNS),
        on=between("t.event_date", first_day, last_day) & matches("event_id"),
        clauses=[
            WhenMatchedUpdate(condition=SortsAfter(VERSION_ORDER), set=every_column),
            WhenNotMatchedInsert(values=every_column),
        ],
        metadata=metadata,
        app_transaction=app_transaction,
    )
    return MergedBatch(result, first_day, last_day, in_window, total - in_window)
