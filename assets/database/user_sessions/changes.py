"""What changed of a run's days since their sessions were last built, and so whose
sessions the run rebuilds: read from the build marks, the visits' log counts and the
first-seen records, never from the days' visits themselves unless a day is rebuilt
whole."""

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from assets.database.user_sessions.inputs import InputVersions
from assets.database.user_sessions.tables import BUILDS
from assets.database.user_sessions.users import (
    MAX_NAMED_USERS,
    EveryUserOf,
    NamedUsers,
    Users,
    instant,
)
from assets.overwriting.data_overwrite import VISITS_DAILY
from assets.overwriting.visit_first_seen import FIRST_SEEN
from resources import Lakehouse
from resources.lakehouse.predicates import Compare, any_of, between, eq, is_in


@dataclass(frozen=True)
class DayMark:
    """What a day's sessions were built from: its visit count and the latest first-seen
    time among them (epoch microseconds), logged in `user_sessions_builds`."""

    day: dt.date
    visits: int
    seen_through: int | None


def stored_marks(lakehouse: Lakehouse, days: Sequence[dt.date]) -> dict[dt.date, DayMark]:
    """The latest build mark of each of `days` that was built."""
    if not lakehouse.exists(BUILDS):
        return {}
    builds = lakehouse.read_arrow(BUILDS, where=between("session_day", days[0], days[-1]))
    marks: dict[dt.date, DayMark] = {}
    for build in sorted(builds.to_pylist(), key=lambda build: build["built_at"]):
        day = build["session_day"]
        marks[day] = DayMark(day, build["day_visits"], build["seen_through"])
    return marks


@dataclass(frozen=True)
class Changes:
    """Whose sessions a run rebuilds, and the marks of the days that changed (a day
    without a mark here is as it was when its sessions were last built)."""

    users: Users
    marks: list[DayMark]
    """Oldest day first."""


def changed_users(lakehouse: Lakehouse, days: Sequence[dt.date], inputs: InputVersions) -> Changes:
    """The users whose visits of `days` (at the `inputs` versions) changed since the
    days' sessions were last built: those with visits first seen after a day's stored
    mark, when the day only gained visits; every user of a day built for the first time
    or that lost or swapped visits (or gained more than `MAX_NAMED_USERS` users' visits).

    Detecting a change reads each built day's visit count from the log and the
    first-seen records newer than its mark (a handful of rows), never the day's visits
    themselves; the days rebuilt whole are counted in one Spark job."""
    marks_stored = stored_marks(lakehouse, days)
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
            version=inputs.first_seen,
            where=any_of(
                eq("event_date", day) & Compare("first_seen_at", ">", instant(seen_through))
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
        count = lakehouse.count(VISITS_DAILY, where=eq("event_date", day), version=inputs.visits)
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
        return Changes(NamedUsers(sorted(named)), sorted(marks, key=lambda mark: mark.day))
    users, every_mark = _whole_days(lakehouse, sorted(whole), named, marks, inputs)
    return Changes(EveryUserOf(users), every_mark)


def _whole_days(
    lakehouse: Lakehouse,
    whole: list[dt.date],
    named: set[str],
    marks: list[DayMark],
    inputs: InputVersions,
) -> tuple[DataFrame, list[DayMark]]:
    """Every user of the `whole` days (and the `named` ones), checkpointed, and the
    marks of every changed day."""
    spark = lakehouse.spark.session()
    day_visits = lakehouse.read(
        VISITS_DAILY,
        version=inputs.visits,
        where=is_in("event_date", whole),
        columns=["event_date", "user_id"],
    )
    users = day_visits.select("user_id")
    if named:
        users = users.unionByName(
            spark.createDataFrame([(user,) for user in named], "user_id string")
        )
    counts: dict[dt.date, int] = dict(day_visits.groupBy("event_date").count().collect())
    seen: dict[dt.date, int] = dict(
        lakehouse.read(
            FIRST_SEEN,
            version=inputs.first_seen,
            where=is_in("event_date", whole),
            columns=["event_date", "first_seen_at"],
        )
        .groupBy("event_date")
        .agg(F.max(F.unix_micros("first_seen_at")))
        .collect()
    )
    whole_marks = [DayMark(day, counts.get(day, 0), seen.get(day)) for day in whole]
    return users.distinct().localCheckpoint(), sorted([*marks, *whole_marks], key=lambda m: m.day)
