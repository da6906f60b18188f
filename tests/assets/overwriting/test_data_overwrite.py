"""visits_daily: Data Overwrite with replaceWhere, one day per materialization."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest
from support import (
    day_of_visits,
    materialize_side_by_side,
    partition_range,
    visit,
)

import assets.partition_range
from assets.overwriting import visits_daily
from assets.overwriting.data_overwrite import VISITS_DAILY
from assets.overwriting.visits_source import VisitDay, parse_visit_days
from assets.source_files import SourceDataError
from assets.transactional_writer import REWRITE_TAG
from resources.lakehouse.predicates import eq

PROJECT_ROOT = Path(__file__).resolve().parents[3]
DEFINITIONS = PROJECT_ROOT / "platform" / "definitions.py"
DAYS = [dt.date(2024, 1, d) for d in (1, 2, 3)]


def materialize(resources, day: dt.date, instance=None, tags=None) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [visits_daily],
        partition_key=day.isoformat(),
        resources=resources,
        instance=instance,
        tags=tags,
    )


def materialize_range(resources, instance, **kwargs) -> dg.ExecuteInProcessResult:
    """DAYS as one run, as a backfill of them launches it."""
    return dg.materialize(
        [visits_daily],
        resources=resources,
        instance=instance,
        tags=partition_range(DAYS[0], DAYS[-1]),
        **kwargs,
    )


def table_rows(lakehouse, **kwargs) -> list[tuple]:
    return sorted(
        (r["visit_id"], r["event_date"], r["page"], r["source_file"], r["source_line"])
        for r in lakehouse.read_arrow(VISITS_DAILY, **kwargs).to_pylist()
    )


@pytest.fixture
def three_days(write_visits):
    for day in DAYS:
        write_visits(day, "part-1.jsonl", day_of_visits(day, 20))


def day_versions(lakehouse) -> dict[str, int]:
    """The version that last wrote each day, from the commit metadata in the history."""
    latest: dict[str, int] = {}
    for entry in reversed(lakehouse.history(VISITS_DAILY)):
        if entry.metadata["partition_key"]:  # not the empty table's creation
            latest[entry.metadata["partition_key"]] = entry.version
    return latest


def test_running_a_day_twice_gives_identical_content(resources, lakehouse, three_days):
    for day in DAYS:
        materialize(resources, day)
    once = table_rows(lakehouse)
    assert len(once) == 60
    version = lakehouse.version(VISITS_DAILY)
    # Its files unchanged, the day is already committed: nothing is written.
    replay = materialize(resources, DAYS[1]).asset_materializations_for_node("visits_daily")
    assert replay[0].metadata["skipped"].value == "already committed at version 1"
    assert (lakehouse.version(VISITS_DAILY), table_rows(lakehouse)) == (version, once)
    # Forced to write (run tag), the day is replaced by the same rows in one commit.
    result = materialize(resources, DAYS[1], tags={REWRITE_TAG: "true"})
    assert table_rows(lakehouse) == once
    metadata = result.asset_materializations_for_node("visits_daily")[0].metadata
    assert metadata["delta_version"].value == version + 1
    assert metadata["rows_inserted"].value == 20
    assert metadata["files_removed"].value == 1
    # The replaceWhere replaced the day's 20 rows: that is what it reports, on both engines.
    assert (metadata["rows_deleted"].value, metadata["rows_copied"].value) == (20, 0)
    # Dagster's standard table metadata, from the Delta log.
    assert metadata["dagster/row_count"].value == 60
    assert metadata["dagster/partition_row_count"].value == 20
    assert metadata["dagster/table_name"].value == "visits_daily"
    assert metadata["dagster/uri"].value == lakehouse.uri(VISITS_DAILY)
    columns = metadata["dagster/column_schema"].value.columns
    assert all(c.description for c in columns), [c.name for c in columns if not c.description]
    schema = {c.name: c.type for c in columns}
    assert (schema["visit_id"], schema["event_date"], schema["source_line"]) == (
        "string",
        "date",
        "integer",
    )
    assert "20 inserted" in metadata["summary"].value
    assert "20 deleted" in metadata["summary"].value
    assert metadata["partition"].value == "2024-01-02"
    assert metadata["table_uri"].value.endswith("/visits_daily")


@pytest.mark.long_on_delta_spark
def test_backfilling_a_day_leaves_other_days_files_untouched(
    resources, lakehouse, three_days, write_visits
):
    for day in DAYS:
        materialize(resources, day)
    other_days = table_rows(lakehouse, where=eq("event_date", DAYS[0]))
    write_visits(
        DAYS[1], "late.jsonl", [visit("late-1", dt.datetime(2024, 1, 2, 12, tzinfo=dt.UTC))]
    )
    result = materialize(resources, DAYS[1])
    assert table_rows(lakehouse, where=eq("event_date", DAYS[0])) == other_days
    metadata = result.asset_materializations_for_node("visits_daily")[0].metadata
    # Only the day's own file was replaced: nothing else was rewritten.
    assert metadata["files_removed"].value == 1
    assert len(table_rows(lakehouse, where=eq("event_date", DAYS[1]))) == 21


def test_duplicated_file_is_kept_once(resources, lakehouse, write_visits):
    visits = day_of_visits(DAYS[0], 10)
    write_visits(DAYS[0], "a.jsonl", visits)
    write_visits(DAYS[0], "a-copy.jsonl", visits[::-1])
    result = materialize(resources, DAYS[0])
    rows = table_rows(lakehouse)
    assert len(rows) == 10
    # The copy from the first file in path order wins, whatever the arrival order.
    assert {r[3] for r in rows} == {"visits/date=2024-01-01/a-copy.jsonl"}
    metadata = result.asset_materializations_for_node("visits_daily")[0].metadata
    assert metadata["duplicates_dropped"].value == 10


@pytest.mark.long_on_delta_spark
def test_a_failure_in_the_middle_of_a_write_leaves_the_previous_content(
    resources, lakehouse, three_days, write_visits
):
    for day in DAYS:
        materialize(resources, day)
    before, version = table_rows(lakehouse), lakehouse.version(VISITS_DAILY)
    schema = lakehouse.read_arrow(VISITS_DAILY).schema
    batch = lakehouse.read_arrow(VISITS_DAILY, where=eq("event_date", DAYS[1])).to_batches()[0]

    def batches_then_crash():
        for _ in range(3):
            yield batch  # delta-rs writes these to data files ...
        raise RuntimeError("disk full")  # ... and never commits them

    with pytest.raises(Exception, match="disk full"):
        lakehouse.overwrite(
            VISITS_DAILY,
            pa.RecordBatchReader.from_batches(schema, batches_then_crash()),
            where=eq("event_date", DAYS[1]),
            metadata={"partition_key": DAYS[1].isoformat()},
        )
    assert lakehouse.version(VISITS_DAILY) == version
    assert table_rows(lakehouse) == before

    # The retry gives exactly the clean result.
    write_visits(
        DAYS[1], "late.jsonl", [visit("late-1", dt.datetime(2024, 1, 2, 9, tzinfo=dt.UTC))]
    )
    materialize(resources, DAYS[1])
    late_row = ("late-1", DAYS[1], "/home", "visits/date=2024-01-02/late.jsonl", 1)
    assert table_rows(lakehouse) == sorted([*before, late_row])


@pytest.mark.long_on_delta_spark
def test_bad_input_names_file_and_line_and_commits_nothing(
    resources, lakehouse, three_days, write_visits
):
    materialize(resources, DAYS[0])
    version = lakehouse.version(VISITS_DAILY)
    good = day_of_visits(DAYS[0], 2)
    body = "".join(
        [
            '{"visit_id": "ok", "user_id": "u", "event_time": "2024-01-01T01:00:00Z", '
            '"page": "/"}\n',
            '{"visit_id": "broken", "user_id": \n',
            '{"visit_id": "nouser", "event_time": "2024-01-01T02:00:00Z", "page": "/"}\n',
            # A time without its offset is not taken as UTC: one rule for every source.
            '{"visit_id": "local", "user_id": "u", "event_time": "2024-01-01T03:00:00", '
            '"page": "/"}\n',
            # Wrong types are refused, never stored as their JSON text.
            '{"visit_id": "ctx", "user_id": "u", "event_time": "2024-01-01T04:00:00Z", '
            '"page": "/", "context": "{oops"}\n',
            '{"visit_id": 7, "user_id": "u", "event_time": "2024-01-01T05:00:00Z", "page": "/"}\n',
        ]
    )
    write_visits(DAYS[0], "bad.jsonl", body)
    write_visits(DAYS[0], "empty.jsonl", "")
    write_visits(DAYS[0], "fine.jsonl", good)
    result = dg.materialize(
        [visits_daily], partition_key="2024-01-01", resources=resources, raise_on_error=False
    )
    assert not result.success
    message = str(result.get_step_failure_events()[0].event_specific_data.error.to_string())
    assert "visits/date=2024-01-01/empty.jsonl: file is empty" in message
    assert lakehouse.version(VISITS_DAILY) == version

    (write_visits(DAYS[0], "empty.jsonl", good))
    result = dg.materialize(
        [visits_daily], partition_key="2024-01-01", resources=resources, raise_on_error=False
    )
    message = str(result.get_step_failure_events()[0].event_specific_data.error.to_string())
    assert "visits/date=2024-01-01/bad.jsonl:2: malformed JSON" in message
    assert "visits/date=2024-01-01/bad.jsonl:3: missing required field 'user_id'" in message
    assert (
        "visits/date=2024-01-01/bad.jsonl:4: event_time '2024-01-01T03:00:00' is not an "
        "ISO-8601 instant with its offset from UTC"
    ) in message
    assert "visits/date=2024-01-01/bad.jsonl:5: field 'context' is STRING, not a JSON object" in (
        message
    )
    assert "visits/date=2024-01-01/bad.jsonl:6: field 'visit_id' is BIGINT, not text" in message
    assert lakehouse.version(VISITS_DAILY) == version


@pytest.mark.long_on_delta_spark
def test_a_backfilled_range_is_one_run_with_a_commit_and_a_materialization_per_day(
    resources, lakehouse, three_days, instance
):
    events = materialize_range(resources, instance).asset_materializations_for_node("visits_daily")
    assert [e.partition for e in events] == [day.isoformat() for day in DAYS]
    # Each day is its own commit, reported on its own partition: restore and the
    # sensors see the days exactly as after three runs of one day each.
    assert {e.partition: e.metadata["delta_version"].value for e in events} == day_versions(
        lakehouse
    )
    assert [e.metadata["rows_inserted"].value for e in events] == [20, 20, 20]
    assert len(table_rows(lakehouse)) == 60
    version = lakehouse.version(VISITS_DAILY)

    replay = materialize_range(resources, instance).asset_materializations_for_node("visits_daily")
    assert [e.metadata["skipped"].value.startswith("already committed") for e in replay] == [
        True
    ] * 3
    assert lakehouse.version(VISITS_DAILY) == version


# How a range reports a failed partition is Dagster's part, the same on either engine.
@pytest.mark.parametrize("engine", ["delta-rs"])
def test_a_bad_day_fails_its_range_by_name_and_the_other_days_land(
    resources, lakehouse, three_days, write_visits, instance
):
    bad = write_visits(DAYS[1], "bad.jsonl", '{"visit_id": "broken", "user_id": \n')
    result = materialize_range(resources, instance, raise_on_error=False)
    assert not result.success
    error = result.get_step_failure_events()[0].event_specific_data.error.to_string()
    assert "1 of 3 partitions failed (2024-01-02); 2 committed" in error
    assert "visits/date=2024-01-02/bad.jsonl:1: malformed JSON" in error
    assert {r[1] for r in table_rows(lakehouse)} == {DAYS[0], DAYS[2]}
    # The committed days show as materialized, each at its own version.
    assert instance.get_materialized_partitions(dg.AssetKey("visits_daily")) == {
        "2024-01-01",
        "2024-01-03",
    }
    bad.unlink()
    again = materialize_range(resources, instance).asset_materializations_for_node("visits_daily")
    assert ["skipped" in e.metadata for e in again] == [True, False, True]
    assert len(table_rows(lakehouse)) == 60


@pytest.mark.parametrize("engine", ["delta-rs"])
def test_a_range_refuses_each_bad_day_as_a_run_of_that_day_alone_would(
    spark, lakehouse, landing, write_visits
):
    """One pass names the bad lines of every day of a range, each day's own first ones:
    a list capped for the whole range would name only its first few days, and a year of
    bad days would take a pass per few days."""
    days = [dt.date(2024, 2, 1) + dt.timedelta(days=i) for i in range(8)]
    for day in days:
        write_visits(day, "a.jsonl", day_of_visits(day, 4))
    for day in days[1:4] + days[5:7]:
        write_visits(
            day, "b.jsonl", '{"visit_id": "x", "event_time": "2024-02-01T00:00:00Z"}\n' * 3
        )
    write_visits(days[6], "c.jsonl", "not json\n" * 12)  # more than a run names
    write_visits(days[7], "c.jsonl", "")  # refused before Spark reads anything
    session = spark.session()

    ranged = parse_visit_days(session, landing, lakehouse, days).days
    for day in days:
        alone = parse_visit_days(session, landing, lakehouse, [day]).days[day]
        if day in (days[0], days[4]):
            assert isinstance(ranged[day], VisitDay) and isinstance(alone, VisitDay)
            assert (ranged[day].sources, ranged[day].lines_read) == (alone.sources, 4)
        else:
            assert isinstance(ranged[day], SourceDataError)
            assert str(ranged[day]) == str(alone), day
    cut = ranged[days[6]]
    assert isinstance(cut, SourceDataError) and cut.more and len(cut.problems) == 10
    assert "missing required field 'user_id'" in str(ranged[days[1]])
    assert "file is empty" in str(ranged[days[7]])


@pytest.mark.slow
def test_a_backfill_as_several_concurrent_runs_lands_every_partition(
    tmp_path, lakehouse, landing, write_visits, spark_remote
):
    """Runs launched side by side, each its own process as the run launcher starts them,
    all writing `visits_daily` (one day twice, so two writers race on the same partition):
    every run succeeds, each day's input is committed exactly once, every day is right."""
    days = [dt.date(2024, 2, d) for d in range(1, 4)]
    for day in days:
        write_visits(day, "part.jsonl", day_of_visits(day, 15))
    work = [*days, days[0]]
    home = tmp_path / "dagster_home"
    materialize_side_by_side(
        home,
        lakehouse,
        landing,
        [["--select", "visits_daily", "--partition", day.isoformat()] for day in work],
        spark=spark_remote,
        timeout=600,
    )
    # Each day's input is committed once: the second run of day 1 is skipped (it found
    # the commit, or its own commit was refused as stale), whatever the interleaving.
    written = [
        h.metadata["partition_key"]
        for h in lakehouse.history(VISITS_DAILY)
        if h.metadata.get("transaction_app_id")
    ]
    assert sorted(written) == sorted(day.isoformat() for day in days)
    rows = table_rows(lakehouse)
    assert len(rows) == 15 * len(days)
    assert {r[1] for r in rows} == set(days)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        records = instance.fetch_materializations(dg.AssetKey("visits_daily"), limit=100).records
    metadata = [r.asset_materialization.metadata for r in records]
    assert len(metadata) == len(work)
    assert sum("skipped" in m for m in metadata) == 1


@pytest.mark.long_on_delta_spark
def test_each_partition_reports_its_phases_in_the_runs_log(
    resources, instance, three_days, monkeypatch
):
    """A long step says where it is: what the range's one read pass and its writes did
    and how long they took, and its partitions' commits, a line every few seconds (here
    none are due but the first and the last)."""
    monkeypatch.setattr(assets.partition_range, "PROGRESS_EVERY_SECONDS", 3600)
    result = materialize_range(resources, instance)
    messages = [record.user_message for record in instance.all_logs(result.run_id)]
    phases = [m for m in messages if m.startswith(f"{VISITS_DAILY} 2024-01-01..2024-01-03: ")]
    assert len(phases) == 3  # read, first seen, write
    read, first_seen, write = phases
    assert read.startswith(
        "visits_daily 2024-01-01..2024-01-03: read (days 3, refused 0, files 3, lines_read 60"
    )
    assert first_seen.startswith("visits_daily 2024-01-01..2024-01-03: first seen in ")
    assert write.startswith("visits_daily 2024-01-01..2024-01-03: write in ")
    assert all(message.endswith(" s") for message in phases)
    days = [m for m in messages if m.startswith("2024-01-0")]
    assert [m.split(" ")[0] for m in days] == ["2024-01-01", "2024-01-03"]
    assert days[1].startswith("2024-01-03 (3/3) in ")
    assert "delta_version=" in days[1] and "rows_inserted=20" in days[1]


@pytest.mark.long_on_delta_spark
def test_a_byte_order_mark_and_crlf_line_ends_are_tolerated(resources, lakehouse, write_visits):
    """The same rule as every other source: a leading BOM is dropped, CRLF reads as LF."""
    rows = day_of_visits(DAYS[0], 3)
    body = "\ufeff" + "".join(json.dumps(r) + "\r\n" for r in rows)
    write_visits(DAYS[0], "windows.jsonl", body)
    materialize(resources, DAYS[0])
    assert sorted(r[0] for r in table_rows(lakehouse)) == sorted(r["visit_id"] for r in rows)


@pytest.mark.long_on_delta_spark
def test_a_file_below_the_day_folder_is_no_input(resources, lakehouse, write_visits):
    """The layout is visits/date=YYYY-MM-DD/<file>, for the run as for the sensor."""
    rows = day_of_visits(DAYS[0], 2)
    folder = write_visits(DAYS[0], "part.jsonl", rows).parent
    (folder / "sub").mkdir()
    nested = day_of_visits(DAYS[0], 2, prefix="nested")
    (folder / "sub" / "nested.jsonl").write_text("".join(json.dumps(v) + "\n" for v in nested))
    materialize(resources, DAYS[0])
    assert sorted(r[0] for r in table_rows(lakehouse)) == sorted(r["visit_id"] for r in rows)
