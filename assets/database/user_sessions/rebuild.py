"""The rebuild of the sessions a run's changes can touch: the window of event time they
reach, widened until no rebuilt session touches its edge, and the stored ids they
retire."""

import datetime as dt
import hashlib
import json
from dataclasses import dataclass

import dagster as dg
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from assets.database.user_sessions.changes import Changes
from assets.database.user_sessions.inputs import InputVersions
from assets.database.user_sessions.sessionize import sessionize
from assets.database.user_sessions.tables import (
    RETIRED,
    SESSIONS_SCHEMA,
    STORED_COLUMNS,
    USER_SESSIONS,
)
from assets.database.user_sessions.users import Users
from assets.overwriting.data_overwrite import VISITS_DAILY
from assets.overwriting.visit_first_seen import FIRST_SEEN
from resources import Lakehouse
from resources.lakehouse.frames import frame_from_arrow
from resources.lakehouse.predicates import And, Compare, between

MAX_WIDENINGS = 20


@dataclass(frozen=True)
class TimeWindow:
    start: dt.datetime
    end: dt.datetime

    def widened(self, start: dt.datetime | None, end: dt.datetime | None) -> "TimeWindow":
        return TimeWindow(min(self.start, start or self.start), max(self.end, end or self.end))

    @property
    def dates(self) -> tuple[dt.date, dt.date]:
        return self.start.date(), self.end.date()


def _overlapping(lakehouse: Lakehouse, window: TimeWindow, users: Users) -> DataFrame:
    """Stored sessions of `users` that come within the window."""
    if not lakehouse.exists(USER_SESSIONS):
        empty = SESSIONS_SCHEMA.empty_table().select(STORED_COLUMNS)
        return frame_from_arrow(lakehouse.spark.session(), empty)
    near = And(
        (Compare("session_end", ">=", window.start), Compare("session_start", "<=", window.end))
    )
    return users.read(lakehouse, USER_SESSIONS, STORED_COLUMNS, near)


def _visits_within(
    lakehouse: Lakehouse, window: TimeWindow, users: Users, inputs: InputVersions
) -> DataFrame:
    low, high = window.dates
    days = between("event_date", low, high)
    columns = ["visit_id", "user_id", "event_time", "event_date"]
    visits = users.read(lakehouse, VISITS_DAILY, columns, days, inputs.visits)
    first_seen = users.read(
        lakehouse, FIRST_SEEN, ["visit_id", "first_seen_at"], days, inputs.first_seen
    )
    return visits.join(first_seen.drop("user_id"), "visit_id", "left").where(
        (F.col("event_time") >= F.lit(window.start)) & (F.col("event_time") <= F.lit(window.end))
    )


@dataclass(frozen=True)
class Rebuild:
    sessions: DataFrame
    retired: DataFrame
    window: TimeWindow
    widenings: int
    changes: Changes


def rebuild(
    lakehouse: Lakehouse, changes: Changes, gap: dt.timedelta, inputs: InputVersions
) -> Rebuild:
    """The sessions that the `changes` (of at least one day) can touch, rebuilt from the
    visits at the `inputs` versions, and the stored ids they retire."""
    users = changes.users
    first, last = changes.marks[0].day, changes.marks[-1].day
    window = TimeWindow(
        dt.datetime.combine(first, dt.time(), dt.UTC) - gap,
        dt.datetime.combine(last + dt.timedelta(days=1), dt.time(), dt.UTC) + gap,
    )
    days = f"{first}" if first == last else f"{first} .. {last}"
    widenings = 0

    def widen(wider: TimeWindow) -> TimeWindow:
        nonlocal widenings
        widenings += 1
        if widenings > MAX_WIDENINGS:
            raise dg.Failure(f"sessions around {days} kept growing after {MAX_WIDENINGS} widenings")
        return wider

    # The stored sessions the changes can reach: within the gap of the changed days. Read
    # once: widening by every stored session the window comes to reach would creep over
    # the whole history wherever sessions of different users overlap around the clock.
    pinned_reached = users.pin(_overlapping(lakehouse, window, users))
    reached = pinned_reached.frame
    low, high, _ = pinned_reached.span(gap)
    window = window.widened(low, high)
    while True:
        sessions = sessionize(_visits_within(lakehouse, window, users, inputs), gap)
        # Rebuilt: the sessions holding a visit of the changed days, or covering a
        # stored one the changes reach (a session split off by a removed visit).
        touching = sessions.join(
            reached.select(
                "user_id",
                F.col("session_start").alias("_s"),
                F.col("session_end").alias("_e"),
            ),
            "user_id",
            "left",
        ).where(
            F.exists("_visit_days", lambda visit_day: visit_day.between(F.lit(first), F.lit(last)))
            | ((F.col("_s") <= F.col("session_end")) & (F.col("_e") >= F.col("session_start")))
        )
        pinned_kept = users.pin(
            touching.drop("_s", "_e", "_visit_days").dropDuplicates(["session_id"])
        )
        kept = pinned_kept.frame
        low, high, unseen = pinned_kept.span(gap)
        if unseen:
            raise dg.Failure(
                f"visit {unseen!r} has no first-seen record in {FIRST_SEEN}: "
                "materialize its visits_daily day again"
            )
        # A rebuilt session within the gap of the window's edge may go on beyond it.
        if window.widened(low, high) == window:
            break
        window = widen(window.widened(low, high))
    kept = _never_retired(lakehouse, kept.drop("_unseen_visit"), users)
    # Retired: the stored sessions the changes reach or a rebuilt one covers (merged
    # into it), that no rebuilt session continues. A rebuilt session that grew covers
    # the stored ones it swallowed whole: outside the changed days no visit changed.
    stored = _overlapping(lakehouse, window, users)
    retired = (
        stored.join(kept.select("session_id"), "session_id", "left_anti")
        .alias("r")
        .join(
            kept.select(
                "user_id",
                F.col("session_id").alias("merged_into"),
                F.col("session_start").alias("_s"),
                F.col("session_end").alias("_e"),
            ).alias("k"),
            (F.col("r.user_id") == F.col("k.user_id"))
            & (F.col("k._s") <= F.col("r.session_end"))
            & (F.col("k._e") >= F.col("r.session_start")),
            "left",
        )
        .groupBy(F.col("r.session_id").alias("session_id"), F.col("r.user_id").alias("user_id"))
        .agg(F.min("merged_into").alias("merged_into"))
        .join(reached.select("session_id", F.lit(True).alias("_reached")), "session_id", "left")
        .where(F.col("merged_into").isNotNull() | F.col("_reached").isNotNull())
        .drop("_reached")
    )
    return Rebuild(kept, users.pin(retired).frame, window, widenings, changes)


def _reborn(session_id: str) -> str:
    return hashlib.sha256(json.dumps({"reborn_from": session_id}).encode()).hexdigest()


def _never_retired(lakehouse: Lakehouse, sessions: DataFrame, users: Users) -> DataFrame:
    """`sessions` with any id that was retired replaced by a new one: a session split off
    again after a visit was removed would otherwise take back the id of the session it
    was merged out of. The new id is derived from the retired one (again while that is
    retired too), so a rerun derives the same."""
    if not lakehouse.exists(RETIRED):
        return sessions
    retired = users.read(lakehouse, RETIRED, ["session_id"]).select("session_id")
    collided = [
        row.session_id for row in sessions.join(retired, "session_id", "left_semi").collect()
    ]
    if not collided:
        return sessions
    taken = {row.session_id for row in retired.collect()}
    renamed = {}
    for session_id in collided:
        new_id = _reborn(session_id)
        while new_id in taken:
            new_id = _reborn(new_id)
        renamed[session_id] = new_id
    mapping = sessions.sparkSession.createDataFrame(
        list(renamed.items()), "session_id string, _new_id string"
    )
    return (
        sessions.join(mapping, "session_id", "left")
        .withColumn("session_id", F.coalesce("_new_id", "session_id"))
        .drop("_new_id")
        .select(sessions.columns)
    )
