"""Keyed Idempotency: `user_sessions`, sessions per user whose ids never change.

A session is a user's run of visits with no inactivity gap longer than `gap_minutes` of
event time. Its id is a SHA-256 of the user and the session's first-*ingested* visit
(its `first_seen_at` from `visit_first_seen`, then its visit id, which orders visits
ingested in one batch): a visit arriving late, even one earlier in event time than the
session's first, was ingested later, so it joins the session without changing its id.
When a late visit bridges two sessions, the merged session keeps the id of the
earliest-ingested one by the same rule, and the other id is retired: recorded in
`user_sessions_retired` (`merged_into`, when, which run) and deleted from
`user_sessions`, which holds live sessions only. A retired id never comes back: when a
visit is removed and a session splits off again, it takes a new id derived from the
retired one.

A run rebuilds only what changed of its days: the users with visits of a day first seen
since the day was last built (`user_sessions_builds` logs each build of a day with its
visit count and latest first-seen time; every user of the day when the day is new or
lost visits), and of those only the sessions within the run's days widened by the gap
and by the stored sessions they reach, widened again until no rebuilt session touches
the window's edge (so a session that runs across days, or days processed out of order,
are rebuilt whole). One MERGE on `session_id`, pinned to the window's session dates,
upserts the changed sessions and deletes the retired ones in one commit; a run whose
days did not change commits nothing. A backfilled range is one such rebuild: one Spark
pass and one commit for all its days, which each get a materialization pointing at it.
"""

import datetime as dt
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from assets.automation import after_upstream
from assets.catalog import RESTORE_WHOLE_TABLE, declared
from assets.materialization import commit_metadata, materialization_metadata, skipped_metadata
from assets.overwriting.data_overwrite import VISITS_DAILY, daily_partitions, visits_daily
from assets.overwriting.visit_first_seen import FIRST_SEEN
from assets.partition_range import SINGLE_RUN, parse_day, run_span
from resources import Lakehouse
from resources.lakehouse import (
    CommitResult,
    WhenMatchedDelete,
    WhenMatchedUpdate,
    WhenNotMatchedInsert,
)
from resources.lakehouse.frames import frame_from_arrow
from resources.lakehouse.predicates import (
    And,
    Compare,
    IsTrue,
    Not,
    Predicate,
    any_of,
    between,
    eq,
    from_source,
    is_in,
    matches,
)

USER_SESSIONS = "user_sessions"
RETIRED = "user_sessions_retired"
SESSIONS_SCHEMA = pa.schema(
    [
        pa.field("session_id", pa.string()),
        pa.field("user_id", pa.string()),
        pa.field("session_start", pa.timestamp("us", tz="UTC")),
        pa.field("session_end", pa.timestamp("us", tz="UTC")),
        pa.field("visits", pa.int64()),
        pa.field("first_ingested_at", pa.timestamp("us", tz="UTC")),
        pa.field("first_ingested_visit", pa.string()),
        pa.field("session_date", pa.date32()),
        pa.field("dagster_run_id", pa.string()),
        pa.field("updated_at", pa.timestamp("us", tz="UTC")),
    ]
)
SESSION_COLUMNS = tuple(SESSIONS_SCHEMA.names)
RETIRED_SCHEMA = pa.schema(
    [
        pa.field("session_id", pa.string()),
        pa.field("user_id", pa.string()),
        pa.field("merged_into", pa.string()),
        pa.field("retired_at", pa.timestamp("us", tz="UTC")),
        pa.field("dagster_run_id", pa.string()),
        pa.field("partition_key", pa.string()),
    ]
)
STORED_COLUMNS = ["session_id", "user_id", "session_start", "session_end", "session_date"]
"""What a rebuild reads of the stored sessions."""
MAX_WIDENINGS = 20
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
MAX_NAMED_USERS = 1_000
"""Up to this many changed users are pushed into the reads by name."""
BUILDS = "user_sessions_builds"
"""One row per build of a day's sessions, appended after its MERGE: an append commits
without reading the table, and the latest row of a day is its mark."""
BUILDS_SCHEMA = pa.schema(
    [
        pa.field("session_day", pa.date32()),
        pa.field("day_visits", pa.int64()),
        pa.field("seen_through", pa.int64()),
        pa.field("built_at", pa.timestamp("us", tz="UTC")),
        pa.field("dagster_run_id", pa.string()),
    ]
)


class SessionSettings(dg.ConfigurableResource):
    gap_minutes: int = 30
    """A visit more than this many minutes (event time) after the previous one of its
    user starts a new session."""


@dataclass(frozen=True)
class TimeWindow:
    start: dt.datetime
    end: dt.datetime

    def widened(self, start: dt.datetime | None, end: dt.datetime | None) -> "TimeWindow":
        return TimeWindow(min(self.start, start or self.start), max(self.end, end or self.end))

    @property
    def dates(self) -> tuple[dt.date, dt.date]:
        return self.start.date(), self.end.date()


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


Users = list[str] | DataFrame
"""Whose sessions a rebuild redoes: a few named users (pushed into the reads as a
predicate), or every user of the day (a DataFrame, semi-joined)."""


def _read_of(
    lakehouse: Lakehouse, table: str, where: Predicate, columns: list[str], users: Users
) -> DataFrame:
    columns = columns if "user_id" in columns else [*columns, "user_id"]
    if isinstance(users, list):
        return lakehouse.read(table, where=And((where, is_in("user_id", users))), columns=columns)
    return lakehouse.read(table, where=where, columns=columns).join(users, "user_id", "left_semi")


def _overlapping(lakehouse: Lakehouse, window: TimeWindow, users: Users) -> DataFrame:
    """Stored sessions of `users` that come within the window."""
    if not lakehouse.exists(USER_SESSIONS):
        empty = SESSIONS_SCHEMA.empty_table().select(STORED_COLUMNS)
        return frame_from_arrow(lakehouse.spark.session(), empty)
    near = And(
        (Compare("session_end", ">=", window.start), Compare("session_start", "<=", window.end))
    )
    return _read_of(lakehouse, USER_SESSIONS, near, STORED_COLUMNS, users)


def _visits_within(lakehouse: Lakehouse, window: TimeWindow, users: Users) -> DataFrame:
    low, high = window.dates
    days = between("event_date", low, high)
    columns = ["visit_id", "user_id", "event_time", "event_date"]
    visits = _read_of(lakehouse, VISITS_DAILY, days, columns, users)
    first_seen = _read_of(lakehouse, FIRST_SEEN, days, ["visit_id", "first_seen_at"], users)
    return visits.join(first_seen.drop("user_id"), "visit_id", "left").where(
        (F.col("event_time") >= F.lit(window.start)) & (F.col("event_time") <= F.lit(window.end))
    )


@dataclass(frozen=True)
class DayMark:
    """What a day's sessions were built from: its visit count and the latest first-seen
    time among them (epoch microseconds), logged in `user_sessions_builds`."""

    day: dt.date
    visits: int
    seen_through: int | None


def _stored_marks(lakehouse: Lakehouse, days: Sequence[dt.date]) -> dict[dt.date, DayMark]:
    """The latest build mark of each of `days` that was built."""
    if not lakehouse.exists(BUILDS):
        return {}
    builds = lakehouse.read_arrow(BUILDS, where=between("session_day", days[0], days[-1]))
    marks: dict[dt.date, DayMark] = {}
    for build in sorted(builds.to_pylist(), key=lambda build: build["built_at"]):
        day = build["session_day"]
        marks[day] = DayMark(day, build["day_visits"], build["seen_through"])
    return marks


def _instant(micros: int) -> dt.datetime:
    return EPOCH + dt.timedelta(microseconds=micros)


@dataclass(frozen=True)
class Changes:
    """Whose sessions a run rebuilds, and the marks of the days that changed (a day
    without a mark here is as it was when its sessions were last built)."""

    users: Users
    marks: list[DayMark]
    """Oldest day first."""


def changed_users(lakehouse: Lakehouse, days: Sequence[dt.date]) -> Changes:
    """The users whose visits of `days` changed since the days' sessions were last
    built: those with visits first seen after a day's stored mark, when the day only
    gained visits; every user of a day built for the first time or that lost or swapped
    visits (or gained more than `MAX_NAMED_USERS` users' visits).

    Detecting a change reads each built day's visit count from the log and the
    first-seen records newer than its mark (a handful of rows), never the day's visits
    themselves; the days rebuilt whole are counted in one Spark job."""
    marks_stored = _stored_marks(lakehouse, days)
    through = {
        day: mark.seen_through
        for day, mark in marks_stored.items()
        if mark.seen_through is not None
    }
    stored = {day: marks_stored[day] for day in through}
    new_by_day: dict[dt.date, list[tuple[str, int]]] = {}
    if stored:
        newer = lakehouse.read_arrow(
            FIRST_SEEN,
            where=any_of(
                eq("event_date", day) & Compare("first_seen_at", ">", _instant(seen_through))
                for day, seen_through in through.items()
            ),
            columns=["event_date", "user_id", "first_seen_at"],
        )
        for day, user, seen in zip(
            newer.column("event_date").to_pylist(),
            newer.column("user_id").to_pylist(),
            pc.cast(newer.column("first_seen_at"), pa.int64()).to_pylist(),
            strict=True,
        ):
            new_by_day.setdefault(day, []).append((user, seen))
    named: set[str] = set()
    marks: list[DayMark] = []
    whole = [day for day in days if day not in stored]
    for day, mark in stored.items():
        new = new_by_day.get(day, [])
        count = lakehouse.count(VISITS_DAILY, where=eq("event_date", day))
        if count != mark.visits + len(new):
            whole.append(day)
        elif new:
            named.update(user for user, _ in new)
            marks.append(DayMark(day, count, max(through[day], *(seen for _, seen in new))))
    if len(named) > MAX_NAMED_USERS:
        whole.extend(mark.day for mark in marks)
        named.clear()
        marks.clear()
    if not whole:
        return Changes(sorted(named), sorted(marks, key=lambda mark: mark.day))
    return Changes(*_whole_days(lakehouse, sorted(whole), named, marks))


def _whole_days(
    lakehouse: Lakehouse, whole: list[dt.date], named: set[str], marks: list[DayMark]
) -> tuple[DataFrame, list[DayMark]]:
    """Every user of the `whole` days (and the `named` ones), checkpointed, and the
    marks of every changed day."""
    spark = lakehouse.spark.session()
    day_visits = lakehouse.read(
        VISITS_DAILY, where=is_in("event_date", whole), columns=["event_date", "user_id"]
    )
    users = day_visits.select("user_id")
    if named:
        users = users.unionByName(
            spark.createDataFrame([(user,) for user in named], "user_id string")
        )
    counts: dict[dt.date, int] = dict(day_visits.groupBy("event_date").count().collect())
    seen: dict[dt.date, int] = dict(
        lakehouse.read(
            FIRST_SEEN, where=is_in("event_date", whole), columns=["event_date", "first_seen_at"]
        )
        .groupBy("event_date")
        .agg(F.max(F.unix_micros("first_seen_at")))
        .collect()
    )
    whole_marks = [DayMark(day, counts.get(day, 0), seen.get(day)) for day in whole]
    return users.distinct().localCheckpoint(), sorted([*marks, *whole_marks], key=lambda m: m.day)


Span = tuple[dt.datetime | None, dt.datetime | None, str | None]
"""Sessions' earliest start and latest end widened by the gap (None: no sessions), and a
visit without a first-seen time among them, if any."""


@dataclass(frozen=True)
class Pinned:
    """A frame computed once, so the widening loop, the retired ids and the MERGE all use
    one result. The sessions of a few named users are small: they come to this process
    and go on as a local relation (Spark plans it without a job, and their span is
    taken here). Every user's stay on the executors, checkpointed, and their span is
    one Spark job."""

    frame: DataFrame
    rows: pa.Table | None

    @classmethod
    def of(cls, frame: DataFrame, users: Users) -> "Pinned":
        if isinstance(users, list):
            rows = frame.toArrow()
            return cls(frame.sparkSession.createDataFrame(rows, schema=frame.schema), rows)
        return cls(frame.localCheckpoint(), None)

    def span(self, gap: dt.timedelta) -> Span:
        # Bounds as epoch microseconds: Spark hands timestamps to Python in its local zone.
        if self.rows is None:
            unseen = (
                F.min("_unseen_visit") if "_unseen_visit" in self.frame.columns else F.lit(None)
            )
            low, high, missing = self.frame.agg(
                F.min(F.unix_micros("session_start")), F.max(F.unix_micros("session_end")), unseen
            ).collect()[0]
        else:
            low, high = (
                pc.min(pc.cast(self.rows.column(name), pa.int64())).as_py()
                for name in ("session_start", "session_end")
            )
            missing = (
                pc.min(self.rows.column("_unseen_visit")).as_py()
                if "_unseen_visit" in self.rows.column_names
                else None
            )
        return (
            None if low is None else _instant(low) - gap,
            None if high is None else _instant(high) + gap,
            missing,
        )


@dataclass(frozen=True)
class Rebuild:
    sessions: DataFrame
    retired: DataFrame
    window: TimeWindow
    widenings: int
    changes: Changes


def rebuild(lakehouse: Lakehouse, changes: Changes, gap: dt.timedelta) -> Rebuild:
    """The sessions that the `changes` (of at least one day) can touch, rebuilt, and the
    stored ids they retire."""
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
    pinned_reached = Pinned.of(_overlapping(lakehouse, window, users), users)
    reached = pinned_reached.frame
    low, high, _ = pinned_reached.span(gap)
    window = window.widened(low, high)
    while True:
        sessions = sessionize(_visits_within(lakehouse, window, users), gap)
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
        pinned_kept = Pinned.of(
            touching.drop("_s", "_e", "_visit_days").dropDuplicates(["session_id"]), users
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
    return Rebuild(kept, Pinned.of(retired, users).frame, window, widenings, changes)


def _reborn(session_id: str) -> str:
    return hashlib.sha256(json.dumps({"reborn_from": session_id}).encode()).hexdigest()


def _never_retired(lakehouse: Lakehouse, sessions: DataFrame, users: Users) -> DataFrame:
    """`sessions` with any id that was retired replaced by a new one: a session split off
    again after a visit was removed would otherwise take back the id of the session it
    was merged out of. The new id is derived from the retired one (again while that is
    retired too), so a rerun derives the same."""
    if not lakehouse.exists(RETIRED):
        return sessions
    if isinstance(users, list):
        retired = lakehouse.read(RETIRED, where=is_in("user_id", users), columns=["session_id"])
    else:
        retired = lakehouse.read(RETIRED, columns=["session_id", "user_id"]).join(
            users, "user_id", "left_semi"
        )
    retired = retired.select("session_id")
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


def _record_retired(
    lakehouse: Lakehouse, retired: DataFrame, *, run_id: str, partition_key: str, metadata: dict
) -> None:
    rows = retired.select(
        "session_id",
        "user_id",
        "merged_into",
        F.current_timestamp().alias("retired_at"),
        F.lit(run_id).alias("dagster_run_id"),
        F.lit(partition_key).alias("partition_key"),
    )
    lakehouse.merge(
        RETIRED,
        rows,
        on=matches("session_id"),
        clauses=[WhenNotMatchedInsert()],
        metadata=metadata,
    )


def publish(
    lakehouse: Lakehouse, rebuild: Rebuild, *, run_id: str, partition_key: str, metadata: dict
) -> tuple[CommitResult, int]:
    """Record the retired ids, then MERGE the rebuild into `user_sessions` in one commit
    (upsert changed sessions, delete retired ones); returns the commit and how many ids
    were retired. Both steps are idempotent, so a retry after a crash between them is
    safe."""
    for table, schema, partitioning in (
        (USER_SESSIONS, SESSIONS_SCHEMA, ["session_date"]),
        (RETIRED, RETIRED_SCHEMA, None),
        (BUILDS, BUILDS_SCHEMA, None),
    ):
        lakehouse.create(table, schema, partition_by=partitioning, metadata=metadata)
    retired_count = rebuild.retired.count()
    if retired_count:
        _record_retired(
            lakehouse,
            rebuild.retired,
            run_id=run_id,
            partition_key=partition_key,
            metadata=metadata,
        )
    source = rebuild.sessions.select(
        *SESSION_COLUMNS[:-2],
        F.lit(run_id).alias("dagster_run_id"),
        F.lit(dt.datetime.now(dt.UTC)).cast("timestamp").alias("updated_at"),
        F.lit(False).alias("_retired"),
    ).unionByName(
        rebuild.retired.select("session_id", "user_id", F.lit(True).alias("_retired")),
        allowMissingColumns=True,
    )
    low, high = rebuild.window.dates
    # Every stored session the rebuild read, and every rebuilt one, starts in the window.
    unchanged = matches("session_start", "session_end", "visits", "first_ingested_at")
    retired = IsTrue("s._retired")
    result = lakehouse.merge(
        USER_SESSIONS,
        source,
        on=between("t.session_date", low, high) & matches("session_id"),
        clauses=[
            WhenMatchedDelete(condition=retired),
            # An unchanged session is left as it is: a rerun rewrites nothing.
            WhenMatchedUpdate(condition=Not(unchanged), set=from_source(SESSION_COLUMNS)),
            WhenNotMatchedInsert(condition=Not(retired), values=from_source(SESSION_COLUMNS)),
        ],
        metadata={**metadata, "retired_sessions": retired_count},
    )
    # After the sessions: a crash in between leaves the older marks, and the retry
    # rebuilds a superset of what changed.
    built_at = dt.datetime.now(dt.UTC)
    builds = [
        {
            "session_day": mark.day,
            "day_visits": mark.visits,
            "seen_through": mark.seen_through,
            "built_at": built_at,
            "dagster_run_id": run_id,
        }
        for mark in rebuild.changes.marks
    ]
    lakehouse.append(BUILDS, pa.Table.from_pylist(builds, schema=BUILDS_SCHEMA), metadata=metadata)
    return result, retired_count


def _named(users: Users) -> str:
    if not isinstance(users, list):
        return "every user of the changed days"
    return ", ".join(users[:20]) + (" ..." if len(users) > 20 else "")


def build(
    context: dg.AssetExecutionContext, lakehouse: Lakehouse, gap: dt.timedelta
) -> dict[str, dict[str, Any]]:
    """Rebuild what changed of the run's days and publish it in one commit: each day's
    metadata. The days that changed share the commit's; the others are skipped."""
    keys = context.partition_keys
    span = run_span(keys)
    days = [parse_day(key) for key in keys]
    changes = changed_users(lakehouse, days)
    changed = {mark.day for mark in changes.marks}
    committed: dict[str, Any] = {}
    if changed:
        rebuilt = rebuild(lakehouse, changes, gap)
        result, retired = publish(
            lakehouse,
            rebuilt,
            run_id=context.run.run_id,
            partition_key=span,
            metadata=commit_metadata(context, partition_key=span),
        )
        committed = materialization_metadata(
            lakehouse,
            result,
            partition_key=span,
            extra={
                "days_rebuilt": dg.MetadataValue.int(len(changed)),
                "sessions_rebuilt": dg.MetadataValue.int(rebuilt.sessions.count()),
                "sessions_retired": dg.MetadataValue.int(retired),
                "window": f"{rebuilt.window.start:%Y-%m-%d %H:%M} .. "
                f"{rebuilt.window.end:%Y-%m-%d %H:%M} UTC",
                "widenings": dg.MetadataValue.int(rebuilt.widenings),
                "users_rebuilt": _named(changes.users),
            },
        )
    unchanged: dict[str, Any] = {}
    if len(changed) < len(days):
        unchanged = skipped_metadata(
            lakehouse,
            USER_SESSIONS,
            reason="no visit of the day changed since its sessions were built",
            partition_key=span,
        )
    return {
        key: committed if day in changed else unchanged for key, day in zip(keys, days, strict=True)
    }


@dg.asset(
    partitions_def=daily_partitions,
    deps=[visits_daily],
    backfill_policy=SINGLE_RUN,
    automation_condition=after_upstream(),
    group_name="database",
    kinds={"spark", "delta"},
    **declared(
        "keyed-idempotency",
        restore=RESTORE_WHOLE_TABLE,
        writes=["user_sessions_retired", "user_sessions_builds"],
    ),
)
def user_sessions(
    context: dg.AssetExecutionContext, lakehouse: Lakehouse, session_settings: SessionSettings
) -> dg.MaterializeResult:
    """Sessions per user (a new one after `gap_minutes` of inactivity) with ids that
    never change across reruns, backfills and late visits: SHA-256 of the user and the
    session's first-ingested visit. Sessions merged by a late visit keep the
    earliest-ingested id; the others are listed in `user_sessions_retired`. A backfilled
    range is one run and one rebuild of what changed in its days: one Spark pass, one
    commit, and a materialization of each day pointing at it."""
    gap = dt.timedelta(minutes=session_settings.gap_minutes)
    for key, metadata in build(context, lakehouse, gap).items():
        context.add_asset_metadata(metadata, partition_key=key)
    return dg.MaterializeResult()
