"""Keyed Idempotency: session ids that survive reruns, late visits and bridging visits."""

import datetime as dt

import dagster as dg
import pytest
from support import partition_range, visit

from assets.database.user_sessions import (
    RETIRED,
    USER_SESSIONS,
    SessionSettings,
    user_sessions,
)
from assets.database.user_sessions.changes import changed_users
from assets.database.user_sessions.inputs import InputVersions
from assets.database.user_sessions.rebuild import rebuild
from assets.overwriting import visits_daily
from assets.overwriting.visit_first_seen import FIRST_SEEN

DAY = dt.date(2024, 6, 3)
NEXT = DAY + dt.timedelta(days=1)


def at(day: dt.date, hhmm: str) -> dt.datetime:
    hour, minute = map(int, hhmm.split(":"))
    return dt.datetime.combine(day, dt.time(hour, minute), dt.UTC)


def deliver(write_visits, day: dt.date, name: str, visits: list[tuple[str, str, str]]) -> None:
    """visits: (visit_id, user_id, HH:MM) on `day`."""
    write_visits(day, name, [visit(vid, at(day, hhmm), user=user) for vid, user, hhmm in visits])


def run(resources, day: dt.date) -> dict:
    result = dg.materialize(
        [visits_daily, user_sessions],
        partition_key=day.isoformat(),
        resources={**resources, "session_settings": SessionSettings()},
    )
    return result.asset_materializations_for_node("user_sessions")[0].metadata


def sessions(lakehouse) -> dict[str, tuple]:
    """session_id -> (user, start HH:MM, end HH:MM, visits)."""
    return {
        r["session_id"]: (
            r["user_id"],
            f"{r['session_start']:%d %H:%M}",
            f"{r['session_end']:%d %H:%M}",
            r["visits"],
        )
        for r in lakehouse.read_arrow(USER_SESSIONS).to_pylist()
    }


def tables(lakehouse) -> tuple:
    return tuple(
        sorted(map(str, lakehouse.read_arrow(table).to_pylist()))
        for table in (USER_SESSIONS, RETIRED, FIRST_SEEN)
        if lakehouse.exists(table)
    )


def test_late_visits_join_their_session_which_keeps_its_id(resources, lakehouse, write_visits):
    """The book's case: the job restarts after late data landed, and every existing
    session keeps its id, also when a late visit is earlier than the session's first."""
    deliver(
        write_visits,
        DAY,
        "a.jsonl",
        [("v1", "u1", "10:00"), ("v2", "u1", "10:10"), ("v3", "u2", "12:00")],
    )
    run(resources, DAY)
    before = {user: sid for sid, (user, *_rest) in sessions(lakehouse).items()}
    deliver(
        write_visits,
        DAY,
        "b.jsonl",
        [("v4", "u1", "09:50"), ("v5", "u1", "10:25"), ("v6", "u2", "15:00")],
    )
    run(resources, DAY)
    after = sessions(lakehouse)
    assert after[before["u1"]] == ("u1", "03 09:50", "03 10:25", 4)
    assert after[before["u2"]] == ("u2", "03 12:00", "03 12:00", 1)
    assert sorted(after.values())[-1] == ("u2", "03 15:00", "03 15:00", 1)
    assert len(after) == 3
    assert lakehouse.count(RETIRED) == 0
    # A rerun changes nothing, and a re-delivered identical visit keeps its first time.
    once = tables(lakehouse)
    deliver(write_visits, DAY, "c.jsonl", [("v1", "u1", "10:00")])
    run(resources, DAY)
    assert tables(lakehouse) == once


@pytest.mark.long_on_delta_spark
def test_a_bridging_visit_merges_sessions_and_retires_the_later_id(
    resources, lakehouse, write_visits
):
    deliver(write_visits, DAY, "a.jsonl", [("a1", "u1", "10:00"), ("a2", "u1", "10:10")])
    run(resources, DAY)
    [first] = sessions(lakehouse)
    deliver(write_visits, DAY, "b.jsonl", [("b1", "u1", "11:00"), ("b2", "u1", "11:10")])
    run(resources, DAY)
    [second] = set(sessions(lakehouse)) - {first}
    deliver(write_visits, DAY, "c.jsonl", [("c1", "u1", "10:35")])
    metadata = run(resources, DAY)
    assert sessions(lakehouse) == {first: ("u1", "03 10:00", "03 11:10", 5)}
    [retired] = lakehouse.read_arrow(RETIRED).to_pylist()
    assert (retired["session_id"], retired["merged_into"]) == (second, first)
    assert retired["partition_key"] == DAY.isoformat() and retired["dagster_run_id"]
    assert metadata["sessions_retired"].value == 1
    once = tables(lakehouse)
    run(resources, DAY)
    assert tables(lakehouse) == once


@pytest.mark.long_on_delta_spark
def test_a_session_split_off_again_never_takes_back_a_retired_id(
    resources, lakehouse, write_visits
):
    deliver(write_visits, DAY, "a.jsonl", [("a1", "u1", "10:00"), ("a2", "u1", "10:10")])
    deliver(write_visits, DAY, "b.jsonl", [("b1", "u1", "11:00"), ("b2", "u1", "11:10")])
    run(resources, DAY)
    first, second = sorted(sessions(lakehouse), key=lambda sid: sessions(lakehouse)[sid][1])
    retired: set[str] = set()
    for _ in range(2):
        # A bridging visit merges the two sessions, and its removal splits them again.
        bridge = write_visits(DAY, "c.jsonl", [visit("c1", at(DAY, "10:35"), user="u1")])
        run(resources, DAY)
        [merged] = sessions(lakehouse)
        assert merged == first
        retired = {row["session_id"] for row in lakehouse.read_arrow(RETIRED).to_pylist()}
        bridge.unlink()
        run(resources, DAY)
        split = sessions(lakehouse)
        assert sorted(split.values()) == [
            ("u1", "03 10:00", "03 10:10", 2),
            ("u1", "03 11:00", "03 11:10", 2),
        ]
        [again] = set(split) - {first}
        assert again not in retired | {second}
        once = tables(lakehouse)
        run(resources, DAY)
        assert tables(lakehouse) == once
    assert len(retired) == 2


@pytest.mark.parametrize(
    "order",
    [
        pytest.param((DAY, NEXT), id="in-order", marks=pytest.mark.long_on_delta_spark),
        pytest.param((NEXT, DAY), id="next-day-first", marks=pytest.mark.long_on_delta_spark),
    ],
)
def test_sessions_across_midnight_are_whole_whatever_the_order_of_days(
    resources, lakehouse, write_visits, instance, order
):
    evening = [(f"e{h}{m}", "u1", f"{h}:{m}") for h in range(20, 24) for m in ("00", "20", "40")]
    deliver(write_visits, DAY, "a.jsonl", [*evening, ("late", "u2", "23:50")])
    deliver(write_visits, NEXT, "a.jsonl", [("n1", "u1", "00:30"), ("n2", "u2", "00:10")])
    for day in order:
        run(resources, day)
    assert sorted(sessions(lakehouse).values()) == [
        ("u1", "03 20:00", "03 23:40", 12),
        ("u1", "04 00:30", "04 00:30", 1),
        ("u2", "03 23:50", "04 00:10", 2),
    ]
    once = tables(lakehouse)
    for day in order:
        run(resources, day)
    assert tables(lakehouse) == once
    # Late visits on both days, then the two days as one range: whichever day was built
    # first, the range rebuilds both, oldest day first.
    deliver(write_visits, DAY, "late.jsonl", [("m1", "u3", "12:00"), ("m2", "u3", "12:20")])
    deliver(write_visits, NEXT, "late.jsonl", [("m3", "u3", "12:00")])
    dg.materialize(
        [visits_daily, user_sessions],
        resources={**resources, "session_settings": SessionSettings()},
        instance=instance,
        tags=partition_range(DAY, NEXT),
    )
    assert sorted(sessions(lakehouse).values()) == [
        ("u1", "03 20:00", "03 23:40", 12),
        ("u1", "04 00:30", "04 00:30", 1),
        ("u2", "03 23:50", "04 00:10", 2),
        ("u3", "03 12:00", "03 12:20", 2),
        ("u3", "04 12:00", "04 12:00", 1),
    ]


@pytest.mark.long_on_delta_spark
def test_a_backfilled_range_builds_its_days_in_one_run_as_runs_of_each_day_do(
    resources, lakehouse, write_visits, instance
):
    evening = [(f"e{h}{m}", "u1", f"{h}:{m}") for h in (22, 23) for m in ("00", "20", "40")]
    deliver(write_visits, DAY, "a.jsonl", [*evening, ("late", "u2", "23:50")])
    deliver(write_visits, NEXT, "a.jsonl", [("n1", "u1", "00:05"), ("n2", "u2", "00:10")])
    result = dg.materialize(
        [visits_daily, user_sessions],
        resources={**resources, "session_settings": SessionSettings()},
        instance=instance,
        tags=partition_range(DAY, NEXT),
    )
    events = result.asset_materializations_for_node("user_sessions")
    assert [event.partition for event in events] == [DAY.isoformat(), NEXT.isoformat()]
    # One rebuild and one commit for the range, which both days' materializations name.
    [version] = {event.metadata["delta_version"].value for event in events}
    created, merged = reversed(lakehouse.history(USER_SESSIONS))
    assert (merged.operation, merged.version) == ("MERGE", version)
    assert sorted(sessions(lakehouse).values()) == [
        ("u1", "03 22:00", "04 00:05", 7),
        ("u2", "03 23:50", "04 00:10", 2),
    ]
    once = tables(lakehouse)
    for day in (NEXT, DAY):  # the days alone, in the other order: nothing changes
        run(resources, day)
    assert tables(lakehouse) == once
    # A late visit of the second day: the range again commits that day alone, once.
    deliver(write_visits, NEXT, "late.jsonl", [("n3", "u2", "00:30")])
    again = dg.materialize(
        [visits_daily, user_sessions],
        resources={**resources, "session_settings": SessionSettings()},
        instance=instance,
        tags=partition_range(DAY, NEXT),
    )
    day, next_day = again.asset_materializations_for_node("user_sessions")
    assert "skipped" in day.metadata and "delta_version" not in day.metadata
    assert next_day.metadata["delta_version"].value == version + 1
    assert sorted(sessions(lakehouse).values()) == [
        ("u1", "03 22:00", "04 00:05", 7),
        ("u2", "03 23:50", "04 00:30", 3),
    ]


@pytest.mark.long_on_delta_spark
def test_days_built_one_after_another_over_sessions_around_the_clock(
    resources, lakehouse, write_visits
):
    """The daily flow over busy data: twelve users each active three hours a day, their
    sessions overlapping one another's around the clock. A new day reaches yesterday's
    last sessions and no further; it once crept back through every stored day, one
    session at a time, and failed after 20 widenings on the third day."""
    days = [DAY + dt.timedelta(days=i) for i in range(3)]
    by_day: dict[dt.date, list[tuple[str, str, str]]] = {}
    for day in days:
        for user in range(12):
            start = dt.datetime.combine(day, dt.time(2 * user), dt.UTC)
            for step in range(9):
                when = start + dt.timedelta(minutes=20 * step)
                if when.date() in days:
                    by_day.setdefault(when.date(), []).append(
                        (f"{day:%d}-{user}-{step}", f"u{user}", when)
                    )
    for day in days:
        write_visits(
            day, "a.jsonl", [visit(vid, when, user=user) for vid, user, when in by_day[day]]
        )
        metadata = run(resources, day)
        assert metadata["widenings"].value <= 2
    want = []
    for day in days:
        for user in range(12):
            start = dt.datetime.combine(day, dt.time(2 * user), dt.UTC)
            visits = [
                start + dt.timedelta(minutes=20 * s)
                for s in range(9)
                if (start + dt.timedelta(minutes=20 * s)).date() in days
            ]
            want.append(
                (f"u{user}", f"{visits[0]:%d %H:%M}", f"{visits[-1]:%d %H:%M}", len(visits))
            )
    assert sorted(sessions(lakehouse).values()) == sorted(want)


@pytest.mark.long_on_delta_spark
def test_a_build_reads_the_visits_at_the_versions_it_started_with_and_names_them(
    resources, lakehouse, write_visits
):
    """A visits run that commits while a build of sessions runs is seen by the next
    build whole, never by part of this one; each materialization names what it read."""
    early = dg.materialize(
        [user_sessions],
        partition_key=DAY.isoformat(),
        resources={**resources, "session_settings": SessionSettings()},
        raise_on_error=False,
    )
    [failure] = early.get_step_failure_events()
    assert "no table visits_daily or visit_first_seen yet" in str(failure.event_specific_data)

    deliver(write_visits, DAY, "a.jsonl", [("v1", "u1", "10:00")])
    metadata = run(resources, DAY)
    assert metadata["visits_daily_version"].value == lakehouse.version("visits_daily")
    assert metadata["visit_first_seen_version"].value == lakehouse.version(FIRST_SEEN)

    deliver(write_visits, DAY, "b.jsonl", [("v2", "u1", "10:10")])
    dg.materialize([visits_daily], partition_key=DAY.isoformat(), resources=resources)
    pinned = InputVersions.current(lakehouse)  # a build starts here
    deliver(write_visits, DAY, "c.jsonl", [("v3", "u1", "10:20")])
    dg.materialize([visits_daily], partition_key=DAY.isoformat(), resources=resources)
    gap = dt.timedelta(minutes=SessionSettings().gap_minutes)
    changes = changed_users(lakehouse, [DAY], pinned)
    assert [(mark.day, mark.visits) for mark in changes.marks] == [(DAY, 2)]
    rebuilt = rebuild(lakehouse, changes, gap, pinned).sessions
    assert [(r["user_id"], r["visits"]) for r in rebuilt.collect()] == [("u1", 2)]

    # The next build reads the latest versions and takes the third visit in.
    metadata = run(resources, DAY)
    assert metadata["visits_daily_version"].value == pinned.visits + 1
    assert [visits for *_rest, visits in sessions(lakehouse).values()] == [3]
