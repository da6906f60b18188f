"""The late-file sensor against a real Dagster instance and a real landing zone."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import dagster as dg
import pytest
from support import day_of_visits, partition_range, sensor_resources, visit

from assets.overwriting import visits_daily
from sensors import file_state, visits_late_files

# The sensor reads the landing zone, the instance and its control table without Spark; the
# test's engine only changes how the fixtures write them, which the assets' tests and
# tests/test_engines_agree.py cover on both engines. The delta-spark halves run in
# `make test-slow`.
pytestmark = pytest.mark.long_on_delta_spark

MONDAY = dt.date(2024, 4, 1)
DAYS = [MONDAY + dt.timedelta(days=i) for i in range(3)]


def tick(instance, landing, cursor=None) -> dg.SensorResult:
    with dg.build_sensor_context(
        instance=instance, cursor=cursor, resources=sensor_resources(landing)
    ) as context:
        return visits_late_files(context)


def requested(result: dg.SensorResult) -> list[tuple[str, str]]:
    """(job, partition) of each request; a range run's partition as `first..last`."""

    def span(request: dg.RunRequest) -> str:
        if request.partition_key is not None:
            return request.partition_key
        start = request.tags["dagster/asset_partition_range_start"]
        return f"{start}..{request.tags['dagster/asset_partition_range_end']}"

    return sorted((r.job_name, span(r)) for r in result.run_requests)


@pytest.fixture
def materialized(resources, instance, write_visits):
    for day in DAYS:
        write_visits(day, "part.jsonl", day_of_visits(day, 4))
    # One range run, as a backfill of the three days runs: a materialization per day.
    dg.materialize(
        [visits_daily],
        tags=partition_range(DAYS[0], DAYS[-1]),
        resources=resources,
        instance=instance,
    )


def test_the_sensor_needs_no_spark():
    # Every tick here runs on a delta-spark lakehouse whose Spark refuses to start.
    assert visits_late_files.required_resource_keys == {"landing", "lakehouse"}


def test_unchanged_and_renotified_files_launch_nothing(instance, landing, materialized):
    first = tick(instance, landing)
    assert first.run_requests == []
    # Re-notified: mtime moves, content does not.
    for stat in landing.list("visits"):
        path = os.path.join(landing.root, stat.path)
        os.utime(path, ns=(stat.mtime_ns + 5 * 10**9, stat.mtime_ns + 5 * 10**9))
    again = tick(instance, landing, first.cursor)
    assert again.run_requests == []


def test_a_late_file_requests_only_its_day(instance, landing, write_visits, materialized):
    """(Its week follows by declarative automation: tests/test_automation.py.)"""
    cursor = tick(instance, landing).cursor
    write_visits(DAYS[1], "late.jsonl", [visit("late", dt.datetime(2024, 4, 2, 7, tzinfo=dt.UTC))])
    result = tick(instance, landing, cursor)
    assert requested(result) == [("visits_daily_job", "2024-04-02")]
    for request in result.run_requests:
        assert request.tags["visits/trigger"] == "late-file"
        assert request.tags["visits/changed_files"] == "visits/date=2024-04-02/late.jsonl"

    # Seen again before the runs happened: the same run keys, so Dagster launches them once.
    repeat = tick(instance, landing, cursor)
    assert sorted(r.run_key for r in repeat.run_requests) == sorted(
        r.run_key for r in result.run_requests
    )


def test_materializing_what_was_asked_settles_the_sensor(
    resources, instance, landing, write_visits, materialized
):
    cursor = tick(instance, landing).cursor
    write_visits(DAYS[2], "part.jsonl", day_of_visits(DAYS[2], 5))  # rewritten with a new row
    result = tick(instance, landing, cursor)
    assert requested(result) == [("visits_daily_job", "2024-04-03")]
    dg.materialize(
        [visits_daily], partition_key="2024-04-03", resources=resources, instance=instance
    )
    # Even with the cursor lost, every file's content matches what was last materialized.
    assert tick(instance, landing).run_requests == []


def test_a_removed_file_dirties_its_day(instance, landing, materialized):
    cursor = tick(instance, landing).cursor
    os.remove(os.path.join(landing.root, "visits", "date=2024-04-01", "part.jsonl"))
    assert requested(tick(instance, landing, cursor)) == [("visits_daily_job", "2024-04-01")]


def test_a_day_never_materialized_is_requested_once_its_partition_exists(
    resources, instance, landing, write_visits, materialized
):
    """The defect this guards against: a file for a day that was never materialized
    launched nothing, ever."""
    cursor = tick(instance, landing).cursor
    new_day = dt.date(2024, 5, 1)
    write_visits(new_day, "new.jsonl", day_of_visits(new_day, 1))
    today = dt.datetime.now(dt.UTC).date()
    write_visits(today, "today.jsonl", day_of_visits(today, 1))
    result = tick(instance, landing, cursor)
    # Today is no partition yet (daily partitions end with yesterday): it waits.
    assert requested(result) == [("visits_daily_job", "2024-05-01")]
    assert {r.tags["visits/trigger"] for r in result.run_requests} == {"new-partition"}
    remembered = file_state.load(
        sensor_resources(landing)["lakehouse"], visits_late_files.name, result.cursor
    )
    assert not any(f"date={today}" in path for path in remembered.fingerprints)  # looked at again
    again = tick(instance, landing, result.cursor)
    assert again.run_requests == []
    dg.materialize(
        [visits_daily], partition_key="2024-05-01", resources=resources, instance=instance
    )
    assert requested(tick(instance, landing, result.cursor)) == []


def test_adjacent_days_are_one_range_run_and_the_rest_their_own(
    resources, instance, landing, write_visits, materialized
):
    """A month of new files must not launch a JVM per day: adjacent new days are one run
    over their range; a day apart from them, or a late file of a materialized
    day, is a run of its own."""
    cursor = tick(instance, landing).cursor
    may = [dt.date(2024, 5, 1) + dt.timedelta(days=i) for i in range(10)]
    for day in [*may, dt.date(2024, 5, 20)]:
        write_visits(day, "new.jsonl", day_of_visits(day, 1))
    write_visits(DAYS[1], "late.jsonl", [visit("late", dt.datetime(2024, 4, 2, 7, tzinfo=dt.UTC))])
    result = tick(instance, landing, cursor)
    assert requested(result) == [
        ("visits_daily_job", "2024-04-02"),
        ("visits_daily_job", "2024-05-01..2024-05-10"),
        ("visits_daily_job", "2024-05-20"),
    ]
    triggers = {
        (r.job_name, r.tags.get("dagster/asset_partition_range_start", r.partition_key)): r.tags[
            "visits/trigger"
        ]
        for r in result.run_requests
    }
    assert triggers[("visits_daily_job", "2024-04-02")] == "late-file"
    assert triggers[("visits_daily_job", "2024-05-01")] == "new-partition"
    # Seen again before the runs: the same keys, so each run launches once.
    again = tick(instance, landing, cursor)
    assert sorted(r.run_key for r in again.run_requests) == sorted(
        r.run_key for r in result.run_requests
    )
    # The range run as Dagster launches it (the job over the range, one run) settles it.
    dg.materialize(
        [visits_daily],
        tags=partition_range("2024-05-01", "2024-05-10"),
        resources=resources,
        instance=instance,
    )
    assert ("visits_daily_job", "2024-05-01..2024-05-10") not in requested(
        tick(instance, landing, result.cursor)
    )


def test_files_changed_back_and_forth_get_a_run_each_time(
    resources, instance, landing, write_visits, materialized
):
    """Input A, then B, then A again: the third run must not reuse the first one's run
    key, or Dagster skips it and the table keeps B while the files say A."""
    cursor = tick(instance, landing).cursor
    keys = []
    for step in range(3):
        late = Path(landing.root) / "visits" / "date=2024-04-02" / "late.jsonl"
        if step % 2 == 0:
            write_visits(
                DAYS[1], "late.jsonl", [visit("late", dt.datetime(2024, 4, 2, 7, tzinfo=dt.UTC))]
            )
        else:
            late.unlink()
        result = tick(instance, landing, cursor)
        cursor = result.cursor
        [request] = [r for r in result.run_requests if r.job_name == "visits_daily_job"]
        keys.append(request.run_key)
        dg.materialize(
            [visits_daily], partition_key="2024-04-02", resources=resources, instance=instance
        )
    assert len(set(keys)) == 3
    settled = tick(instance, landing, cursor).run_requests
    assert [r for r in settled if r.job_name == "visits_daily_job"] == []
