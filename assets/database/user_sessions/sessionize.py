"""Sessions cut from visits: a pure Spark transformation, no table read or written."""

import datetime as dt

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F


def sessionize(visits: DataFrame, gap: dt.timedelta) -> DataFrame:
    """One row per session of `visits` (user_id, visit_id, event_time, first_seen_at,
    event_date): its span, size, first-ingested visit and id, `_visit_days`, and
    `_unseen_visit` (a visit without a first-seen time, if any)."""
    order = Window.partitionBy("user_id").orderBy("event_time", "visit_id")
    previous = F.lag("event_time").over(order)
    gap_micros = int(gap / dt.timedelta(microseconds=1))
    starts = previous.isNull() | (
        F.unix_micros("event_time") - F.unix_micros(previous) > gap_micros
    )
    numbered = visits.withColumn(
        "_session",
        F.sum(starts.cast("int")).over(order.rowsBetween(Window.unboundedPreceding, 0)),
    )
    first = F.min(F.struct("first_seen_at", "visit_id"))
    sessions = numbered.groupBy("user_id", "_session").agg(
        F.min("event_time").alias("session_start"),
        F.max("event_time").alias("session_end"),
        F.count("*").cast("long").alias("visits"),
        first.alias("_first"),
        F.collect_set("event_date").alias("_visit_days"),
        F.min(F.when(F.col("first_seen_at").isNull(), F.col("visit_id"))).alias("_unseen_visit"),
    )
    # Unambiguous encoding: JSON of typed fields, no separator content can imitate.
    identity = F.to_json(
        F.struct(
            F.col("user_id"),
            F.unix_micros("_first.first_seen_at").alias("first_seen_micros"),
            F.col("_first.visit_id").alias("visit_id"),
        )
    )
    return sessions.select(
        F.sha2(identity, 256).alias("session_id"),
        "user_id",
        "session_start",
        "session_end",
        "visits",
        F.col("_first.first_seen_at").alias("first_ingested_at"),
        F.col("_first.visit_id").alias("first_ingested_visit"),
        F.to_date("session_start").alias("session_date"),
        "_visit_days",
        "_unseen_visit",
    )
