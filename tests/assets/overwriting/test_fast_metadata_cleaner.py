"""visits_weekly: one Delta table per week built from visits_daily's days, replaced whole;
the visits exposition; freezing old weeks into yearly tables."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import dagster as dg
import pytest
from support import day_of_visits, partition_range, visit

from assets.overwriting import freeze_visits_weeks, visits_daily, visits_weekly
from assets.overwriting.data_overwrite import VISITS_DAILY
from assets.overwriting.exposition import (
    VISITS_MANIFEST,
    active_tables,
    manifest_entries,
    read_visits,
    register_visits_view,
    weekly_table,
    yearly_table,
)

# Five weeks around the turn of the year: 2024-12-16 ... 2025-01-19.
WEEKS = [dt.date(2024, 12, 16) + dt.timedelta(weeks=i) for i in range(5)]


def build_days(resources, first: dt.date, last: dt.date) -> None:
    """visits_daily's days `first` to `last`, in one range run."""
    dg.materialize([visits_daily], resources=resources, tags=partition_range(first, last))


def materialize(resources, monday: dt.date, **kwargs) -> dg.ExecuteInProcessResult:
    """The week's days of visits_daily, then the week."""
    build_days(resources, monday, monday + dt.timedelta(days=6))
    return dg.materialize(
        [visits_weekly], partition_key=monday.isoformat(), resources=resources, **kwargs
    )


def exposed(lakehouse, spark) -> list[tuple]:
    return sorted(
        (r.visit_id, r.event_date, r.week_start, r.source_file)
        for r in read_visits(lakehouse, spark.session()).collect()
    )


def write_weeks(write_visits, weeks=WEEKS, per_day: int = 3) -> None:
    for monday in weeks:
        for i in range(7):
            day = monday + dt.timedelta(days=i)
            write_visits(day, "part.jsonl", day_of_visits(day, per_day))


@pytest.mark.long_on_delta_spark
def test_week_spanning_new_year_reads_its_seven_days(resources, lakehouse, spark, write_visits):
    write_weeks(write_visits, [dt.date(2024, 12, 30)], per_day=2)
    materialize(resources, dt.date(2024, 12, 30))
    rows = exposed(lakehouse, spark)
    assert len(rows) == 14
    assert {r[1] for r in rows} == {dt.date(2024, 12, 30) + dt.timedelta(days=i) for i in range(7)}
    assert {r[2] for r in rows} == {dt.date(2024, 12, 30)}
    register_visits_view(lakehouse, spark.session())
    [count] = spark.session().sql("SELECT count(*) AS n FROM visits").collect()
    assert count.n == 14


@pytest.mark.long_on_delta_spark
def test_a_week_holds_exactly_its_days_of_visits_daily(resources, lakehouse, spark, write_visits):
    write_weeks(write_visits, WEEKS[1:3], per_day=2)
    result = materialize(resources, WEEKS[1])
    daily = lakehouse.read_arrow(VISITS_DAILY).to_pylist()
    in_week = sorted(
        (r["visit_id"], r["event_date"], WEEKS[1], r["source_file"])
        for r in daily
        if r["event_date"] < WEEKS[2]
    )
    assert exposed(lakehouse, spark) == in_week
    assert len(in_week) == 14
    # It says which version of visits_daily it was read from, in Dagster and in Delta.
    metadata = result.asset_materializations_for_node("visits_weekly")[0].metadata
    assert metadata["visits_daily_version"].value == lakehouse.version(VISITS_DAILY)
    [commit, *_] = lakehouse.history(weekly_table(WEEKS[1]))
    assert commit.metadata["visits_daily_version"] == lakehouse.version(VISITS_DAILY)


@pytest.mark.long_on_delta_spark
def test_a_week_with_no_day_in_visits_daily_fails_naming_it_and_the_others_land(
    resources, lakehouse, spark, write_visits
):
    """A week is never built from nothing: an empty table in the exposition would look
    like a week without visits."""
    with pytest.raises(dg.Failure, match="visits_daily holds no day of 2024-12-16 .. 2024-12-22"):
        dg.materialize([visits_weekly], partition_key=WEEKS[0].isoformat(), resources=resources)
    write_weeks(write_visits, WEEKS[:1], per_day=1)
    build_days(resources, WEEKS[0], WEEKS[0] + dt.timedelta(days=6))
    result = dg.materialize(
        [visits_weekly],
        resources=resources,
        tags=partition_range(WEEKS[0], WEEKS[1]),
        raise_on_error=False,
    )
    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    message = failure.step_failure_data.error.message
    assert "1 of 2 partitions failed (2024-12-23); 1 committed" in message
    assert "visits_daily holds no day of 2024-12-23 .. 2024-12-29" in message
    assert active_tables(manifest_entries(lakehouse)) == {WEEKS[0]: weekly_table(WEEKS[0])}
    assert len(exposed(lakehouse, spark)) == 7


@pytest.mark.long_on_delta_spark
def test_rerun_is_identical_and_backfill_leaves_other_weeks_at_their_version(
    resources, lakehouse, spark, write_visits
):
    write_weeks(write_visits)
    build_days(resources, WEEKS[0], WEEKS[-1] + dt.timedelta(days=6))
    # The five weeks backfilled as one run: each week still has its own commit.
    backfill = dg.materialize(
        [visits_weekly], resources=resources, tags=partition_range(WEEKS[0], WEEKS[-1])
    )
    assert [
        (e.partition, e.metadata["table_name"].value, e.metadata["delta_version"].value)
        for e in backfill.asset_materializations_for_node("visits_weekly")
    ] == [(m.isoformat(), weekly_table(m), 0) for m in WEEKS]
    before = exposed(lakehouse, spark)
    versions = {m: lakehouse.version(weekly_table(m)) for m in WEEKS}
    manifest_version = lakehouse.version(VISITS_MANIFEST)

    # Its days unchanged, the week alone again.
    result = dg.materialize(
        [visits_weekly], partition_key=WEEKS[2].isoformat(), resources=resources
    )
    assert exposed(lakehouse, spark) == before
    assert {m: lakehouse.version(weekly_table(m)) for m in WEEKS} == {
        **versions,
        WEEKS[2]: versions[WEEKS[2]] + 1,
    }
    # Re-materializing a registered week does not touch the exposition.
    assert lakehouse.version(VISITS_MANIFEST) == manifest_version
    metadata = result.asset_materializations_for_node("visits_weekly")[0].metadata
    assert metadata["table_name"].value == weekly_table(WEEKS[2])
    assert metadata["delta_operation"].value == "WRITE"
    assert metadata["rows_inserted"].value == 21


def test_replacing_a_week_is_a_metadata_commit_not_a_row_delete(resources, lakehouse, write_visits):
    write_weeks(write_visits, WEEKS[:1])
    materialize(resources, WEEKS[0])
    write_visits(
        WEEKS[0], "late.jsonl", [visit("late", dt.datetime(2024, 12, 16, 5, tzinfo=dt.UTC))]
    )
    materialize(resources, WEEKS[0])
    [last, *_] = lakehouse.history(weekly_table(WEEKS[0]))
    assert last.operation == "WRITE"
    assert last.parameters["mode"] == "Overwrite"
    assert last.metrics["rows_deleted"] == 0


@pytest.mark.long_on_delta_spark
def test_table_count_check_warns_near_the_limit(resources, write_visits):
    write_weeks(write_visits, WEEKS[:3], per_day=1)
    for monday in WEEKS[:2]:
        result = materialize(
            resources,
            monday,
            run_config={
                "ops": {"visits_weekly": {"config": {"table_limit": 3, "warn_ratio": 0.6}}}
            },
        )
    [check] = result.get_asset_check_evaluations()
    assert not check.passed
    assert check.severity == dg.AssetCheckSeverity.WARN
    assert check.metadata["tables"].value == 2


def freeze(resources, **config) -> dg.ExecuteInProcessResult:
    return freeze_visits_weeks.execute_in_process(
        run_config={"ops": {"freeze_old_weeks": {"config": config}}},
        resources={k: resources[k] for k in ("lakehouse", "spark")},
    )


@pytest.mark.long_on_delta_spark
def test_freezing_folds_old_weeks_by_iso_year_and_keeps_the_exposition_identical(
    resources, lakehouse, spark, write_visits
):
    write_weeks(write_visits)
    for monday in WEEKS:
        materialize(resources, monday)
    before = exposed(lakehouse, spark)

    # As of 2025-02-03, weeks that ended by 2025-01-13 (3 weeks before) are frozen: four.
    freeze(resources, older_than_weeks=3, as_of="2025-02-03", retire_grace_hours=0)

    assert exposed(lakehouse, spark) == before
    assert active_tables(manifest_entries(lakehouse)) == {
        WEEKS[0]: yearly_table(2024),
        WEEKS[1]: yearly_table(2024),
        WEEKS[2]: yearly_table(2025),  # 2024-12-30 is in ISO year 2025
        WEEKS[3]: yearly_table(2025),
        WEEKS[4]: weekly_table(WEEKS[4]),
    }
    # Retired weekly tables are gone from storage and from the manifest.
    assert not Path(lakehouse.uri(weekly_table(WEEKS[0]))).exists()
    assert {e.status for e in manifest_entries(lakehouse)} == {"active"}

    # Freezing again changes nothing.
    freeze(resources, older_than_weeks=3, as_of="2025-02-03", retire_grace_hours=0)
    assert exposed(lakehouse, spark) == before

    # A late file for a frozen week replaces just that week inside its yearly table.
    write_visits(
        WEEKS[2], "late.jsonl", [visit("late", dt.datetime(2024, 12, 30, 8, tzinfo=dt.UTC))]
    )
    result = materialize(resources, WEEKS[2])
    metadata = result.asset_materializations_for_node("visits_weekly")[0].metadata
    assert metadata["table_name"].value == yearly_table(2025)
    late = ("late", dt.date(2024, 12, 30), WEEKS[2], "visits/date=2024-12-30/late.jsonl")
    assert exposed(lakehouse, spark) == sorted([*before, late])


@pytest.mark.long_on_delta_spark
def test_retired_tables_stay_readable_during_the_grace_period(
    resources, lakehouse, spark, write_visits
):
    write_weeks(write_visits, WEEKS[:2], per_day=1)
    for monday in WEEKS[:2]:
        materialize(resources, monday)
    freeze(resources, older_than_weeks=0, as_of="2025-03-03", retire_grace_hours=24)
    assert Path(lakehouse.uri(weekly_table(WEEKS[0]))).exists()
    assert {e.status for e in manifest_entries(lakehouse)} == {"active", "retired"}
    assert len(exposed(lakehouse, spark)) == 14
