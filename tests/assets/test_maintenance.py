"""restore_table and vacuum_table jobs against real tables and a real instance."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import dagster as dg
import pytest
from support import day_of_visits, sensor_resources, visit

from assets.maintenance import RestoreRequestError, restore_table, vacuum_table
from assets.overwriting import visits_daily
from assets.overwriting.data_overwrite import VISITS_DAILY
from assets.updates import devices
from assets.updates.change_files import devices_cdc_path
from assets.updates.merger import DEVICES
from sensors import visits_late_files

DAY = dt.date(2024, 3, 4)


def rows(lakehouse) -> list[str]:
    return sorted(r["visit_id"] for r in lakehouse.read_arrow(VISITS_DAILY).to_pylist())


def run_job(job, instance, resources, config, raise_on_error=True):
    return job.execute_in_process(
        run_config={"ops": {next(iter(job.graph.node_dict)): {"config": config}}},
        resources={"lakehouse": resources["lakehouse"]},
        instance=instance,
        raise_on_error=raise_on_error,
    )


def undo(asset_key: str, partition: str) -> dict:
    """restore_table's config: undo the partition's latest committed materialization."""
    return {"target": {"undo_materialization": {"asset_key": asset_key, "partition": partition}}}


def to_version(table: str, version: int) -> dict:
    """restore_table's config: move the whole table to `version`."""
    return {"target": {"table_version": {"table": table, "version": version}}}


def materialize_twice(resources, instance, write_visits) -> list[str]:
    """A good day, then a bad batch on top of it; returns the good day's visit ids."""
    write_visits(DAY, "a.jsonl", day_of_visits(DAY, 3))
    dg.materialize(
        [visits_daily], partition_key=DAY.isoformat(), resources=resources, instance=instance
    )
    first = rows(resources["lakehouse"])
    write_visits(DAY, "b.jsonl", [visit("bad-batch", dt.datetime(2024, 3, 4, 9, tzinfo=dt.UTC))])
    dg.materialize(
        [visits_daily], partition_key=DAY.isoformat(), resources=resources, instance=instance
    )
    return first


@pytest.fixture
def two_materializations(resources, instance, write_visits):
    return materialize_twice(resources, instance, write_visits)


def reported(result: dg.ExecuteInProcessResult) -> list[tuple[str, str, bool]]:
    """The materializations a restore reported: (asset, partition, needs_rerun)."""
    return [
        (
            e.asset_key.to_user_string(),
            e.event_specific_data.materialization.partition,
            e.event_specific_data.materialization.metadata["needs_rerun"].value,
        )
        for e in result.all_events
        if e.event_type_value == "ASSET_MATERIALIZATION"
    ]


def test_restore_to_just_before_a_partitions_materialization(
    resources, instance, lakehouse, two_materializations
):
    assert "bad-batch" in rows(lakehouse)
    result = run_job(
        restore_table,
        instance,
        resources,
        undo("visits_daily", DAY.isoformat()),
    )
    assert rows(lakehouse) == two_materializations
    assert lakehouse.version(VISITS_DAILY) == 3  # 0: created empty, 1, 2: the two runs
    # Asked for: it stays restored (the file sensor is quiet until its files change).
    assert reported(result) == [("visits_daily", DAY.isoformat(), False)]
    with dg.build_sensor_context(
        instance=instance, resources=sensor_resources(resources["landing"])
    ) as sensor:
        requested = visits_late_files(sensor).run_requests
    assert [r.partition_key for r in requested if r.job_name == "visits_daily_job"] == []
    # The partition's next run writes again (the restore undid its committed input).
    dg.materialize(
        [visits_daily], partition_key=DAY.isoformat(), resources=resources, instance=instance
    )
    assert "bad-batch" in rows(lakehouse)


@pytest.mark.long_on_delta_spark  # the port's restore of a window: the contract tests
def test_restoring_one_partition_leaves_the_others_as_they_are(
    resources, instance, lakehouse, write_visits
):
    """The defect this guards against: restoring one day rolled the whole table back, and
    other days lost their later commits while Dagster still showed them current."""
    other = DAY + dt.timedelta(days=1)
    write_visits(DAY, "a.jsonl", day_of_visits(DAY, 3))
    write_visits(other, "a.jsonl", day_of_visits(other, 2))
    for day in (DAY, other):
        dg.materialize(
            [visits_daily], partition_key=day.isoformat(), resources=resources, instance=instance
        )
    good_day = rows(lakehouse)
    write_visits(DAY, "b.jsonl", [visit("bad", dt.datetime(2024, 3, 4, 9, tzinfo=dt.UTC))])
    write_visits(other, "b.jsonl", [visit("late", dt.datetime(2024, 3, 5, 9, tzinfo=dt.UTC))])
    for day in (DAY, other):
        dg.materialize(
            [visits_daily], partition_key=day.isoformat(), resources=resources, instance=instance
        )
    version = lakehouse.version(VISITS_DAILY)
    result = run_job(
        restore_table,
        instance,
        resources,
        undo("visits_daily", DAY.isoformat()),
    )
    assert rows(lakehouse) == sorted([*good_day, "late"])
    assert lakehouse.version(VISITS_DAILY) == version + 1  # one commit
    assert reported(result) == [("visits_daily", DAY.isoformat(), False)]
    [restored] = [
        e.event_specific_data.materialization.metadata
        for e in result.all_events
        if e.event_type_value == "ASSET_MATERIALIZATION"
    ]
    assert restored["restore_scope"].value.startswith(f"partition {DAY.isoformat()}")
    assert restored["delta_version"].value == version + 1
    # Restoring it again undoes the restore: the bad batch is back, the other day too.
    run_job(
        restore_table,
        instance,
        resources,
        undo("visits_daily", DAY.isoformat()),
    )
    assert rows(lakehouse) == sorted([*good_day, "bad", "late"])


@pytest.mark.long_on_delta_spark
def test_a_whole_table_restore_reports_every_partition_it_moved(
    resources, instance, lakehouse, write_visits
):
    other = DAY + dt.timedelta(days=1)
    write_visits(DAY, "a.jsonl", day_of_visits(DAY, 3))
    dg.materialize(
        [visits_daily], partition_key=DAY.isoformat(), resources=resources, instance=instance
    )
    version = lakehouse.version(VISITS_DAILY)
    write_visits(other, "a.jsonl", day_of_visits(other, 2))
    write_visits(DAY, "b.jsonl", [visit("bad", dt.datetime(2024, 3, 4, 9, tzinfo=dt.UTC))])
    for day in (other, DAY):
        dg.materialize(
            [visits_daily], partition_key=day.isoformat(), resources=resources, instance=instance
        )
    result = run_job(restore_table, instance, resources, to_version(VISITS_DAILY, version))
    # The whole table was asked for: every moved day stays restored.
    assert sorted(reported(result)) == [
        ("visits_daily", DAY.isoformat(), False),
        ("visits_daily", other.isoformat(), False),
    ]
    assert lakehouse.history(VISITS_DAILY, limit=1)[0].operation == "RESTORE"


@pytest.mark.long_on_delta_spark
def test_partitions_moved_along_with_a_whole_table_need_a_rerun(
    resources, instance, lakehouse, landing
):
    """devices is one MERGE target: restoring one day moves the whole table, and the days
    moved with it are reported as needing a re-run; the day asked for is not."""
    day1, day2 = DAY, DAY + dt.timedelta(days=1)
    for day, body in ((day1, "phone;Pixel;1\n"), (day2, "tablet;Tab;1\n")):
        path = Path(landing.root) / devices_cdc_path(day)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("type;full_name;version\n" + body)
        dg.materialize(
            [devices], partition_key=day.isoformat(), resources=resources, instance=instance
        )
    result = run_job(restore_table, instance, resources, undo("devices", day1.isoformat()))
    assert sorted(reported(result)) == [
        ("devices", day1.isoformat(), False),
        ("devices", day2.isoformat(), True),
    ]
    assert lakehouse.count(DEVICES) == 0


def test_restore_to_an_explicit_version(resources, instance, lakehouse, two_materializations):
    run_job(restore_table, instance, resources, to_version(VISITS_DAILY, 1))
    assert rows(lakehouse) == two_materializations


@pytest.mark.long_on_delta_spark
def test_restore_refuses_a_vacuumed_version_and_changes_nothing(
    resources, instance, lakehouse, two_materializations
):
    result = run_job(
        vacuum_table, instance, resources, {"table": VISITS_DAILY, "retention_hours": 0}
    )
    assert result.success
    current, version = rows(lakehouse), lakehouse.version(VISITS_DAILY)
    result = run_job(
        restore_table,
        instance,
        resources,
        undo("visits_daily", DAY.isoformat()),
        raise_on_error=False,
    )
    assert not result.success
    error = str(result.get_step_failure_events()[0].event_specific_data.error.to_string())
    assert "version 1 of Delta table 'visits_daily' is not available" in error
    assert "VACUUM" in error and "retention 0 h" in error
    assert (rows(lakehouse), lakehouse.version(VISITS_DAILY)) == (current, version)


def test_restore_requests_that_name_nothing_restorable_are_refused(resources, instance, lakehouse):
    # Dagster refuses a request naming neither form before any run starts (the launchpad
    # will not launch it).
    for config, message in [
        ({}, 'Missing required config entry "target"'),
        ({"target": {"table_version": {"version": 1}}}, 'Missing required config entry "table"'),
    ]:
        with pytest.raises(dg.DagsterInvalidConfigError, match=message):
            run_job(restore_table, instance, resources, config)
    with pytest.raises(RestoreRequestError, match="no materialization"):
        run_job(restore_table, instance, resources, undo("visits_daily", "2024-01-01"))


@pytest.mark.long_on_delta_spark
def test_the_jobs_restore_and_vacuum_a_table_on_the_object_store(
    spark, s3_lakehouse, landing, instance, write_visits
):
    resources = {"spark": spark, "lakehouse": s3_lakehouse, "landing": landing}
    good = materialize_twice(resources, instance, write_visits)
    run_job(
        restore_table,
        instance,
        resources,
        undo("visits_daily", DAY.isoformat()),
    )
    assert rows(s3_lakehouse) == good
    # The day alone was restored: its rows as of version 1, written back with replaceWhere.
    assert s3_lakehouse.history(VISITS_DAILY, limit=1)[0].metadata["restored_to"] == 1
    assert not s3_lakehouse.missing_files(VISITS_DAILY, 2)
    run_job(vacuum_table, instance, resources, {"table": VISITS_DAILY, "retention_hours": 0})
    assert s3_lakehouse.missing_files(VISITS_DAILY, 2)  # the bad batch's files are gone
    assert rows(s3_lakehouse) == good
