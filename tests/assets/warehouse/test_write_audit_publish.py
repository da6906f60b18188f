"""Write-audit-publish on both engines: a batch reaches `user_events` only when every
audit passes; a failed audit leaves `user_events` at its version and the staged batch
readable; the event sensor launches each batch once per content."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import dagster as dg
import pytest
from support import partition_range, sensor_resources

from assets.warehouse import (
    EventSettings,
    event_batch_job,
    event_batches,
    user_events,
    user_events_staging,
)
from assets.warehouse.events_source import batch_file
from assets.warehouse.staging_merge import USER_EVENTS
from assets.warehouse.user_events import (
    COUNT_CHECK,
    KEYS_CHECK,
    STAGING,
    TIMES_CHECK,
    audits,
)
from resources.lakehouse.predicates import eq
from sensors.event_batches import event_batch_files

T0 = "2024-05-01T10:00:00+00:00"


def event(event_id: str, ts: str = T0, **payload) -> dict:
    return {
        "event_id": event_id,
        "event_timestamp": ts,
        "ingestion_time": "2024-05-02T00:00:00+00:00",
        "user_id": "u1",
        "payload": payload or {"page": "/"},
    }


@pytest.fixture
def write_batch(landing):
    def write(batch_id: str, rows: list[dict]) -> Path:
        path = Path(landing.root) / batch_file(batch_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return path

    return write


@pytest.fixture
def run_batch(resources, instance):
    resources = {**resources, "event_settings": EventSettings()}

    def run(batch_id: str, assets=(user_events_staging, user_events)) -> dg.ExecuteInProcessResult:
        instance.add_dynamic_partitions(event_batches.name, [batch_id])
        return dg.materialize(
            list(assets),
            partition_key=batch_id,
            resources=resources,
            instance=instance,
            raise_on_error=False,
        )

    return run


def checks(result: dg.ExecuteInProcessResult) -> dict[str, bool]:
    return {e.check_name: e.passed for e in result.get_asset_check_evaluations()}


def test_a_clean_batch_is_staged_audited_and_published(lakehouse, write_batch, run_batch):
    write_batch("b1", [event("e1"), event("e2"), event("e1", ts="2024-05-01T11:00:00+00:00")])
    result = run_batch("b1")
    assert result.success
    assert checks(result) == {KEYS_CHECK: True, TIMES_CHECK: True, COUNT_CHECK: True}
    staged = result.asset_materializations_for_node("user_events_staging")[0].metadata
    assert (staged["staged_rows"].value, staged["versions_dropped"].value) == (2, 1)
    assert staged["staged_where"].value.startswith("batch_id = 'b1'")
    assert lakehouse.count(USER_EVENTS) == 2
    published = result.asset_materializations_for_node("user_events")[0].metadata
    assert published["delta_version"].value == lakehouse.version(USER_EVENTS)


def test_a_published_version_that_moves_a_row_says_what_its_merge_did_to_the_old_file(
    lakehouse, write_batch, run_batch
):
    """A newer version a month later moves its event out of its day, and the
    materialization says what the MERGE did to the old row's file: Delta Spark marks the
    row (the file stays, with a deletion vector), delta-rs writes the file's other rows
    again (it cannot write vectors yet)."""
    write_batch("b1", [event("e1"), event("e2")])
    write_batch("b2", [event("e1", ts="2024-06-01T10:00:00+00:00")])
    assert run_batch("b1").success
    result = run_batch("b2")
    assert result.success
    published = result.asset_materializations_for_node("user_events")[0].metadata
    marks = lakehouse.engine == "delta-spark"
    assert published["rows_updated"].value == 1
    assert published["files_marked"].value == (1 if marks else 0)
    assert published["rows_copied"].value == (0 if marks else 1)
    summary = published["summary"].value
    assert ("1 file(s) kept, their replaced rows marked deleted" in summary) == marks
    assert lakehouse.count(USER_EVENTS) == 2


@pytest.mark.long_on_delta_spark
@pytest.mark.parametrize(
    "bad_time",
    [
        "1999-12-31T23:59:59+00:00",
        (dt.datetime.now(dt.UTC) + dt.timedelta(days=2)).isoformat(),
    ],
    ids=["before-2000", "in-the-future"],
)
def test_an_event_time_out_of_bounds_fails_the_run_and_publishes_nothing(
    lakehouse, write_batch, run_batch, bad_time
):
    write_batch("good", [event("e0")])
    assert run_batch("good").success
    version = lakehouse.version(USER_EVENTS)
    write_batch("bad", [event("e1"), event("e2", ts=bad_time)])
    result = run_batch("bad")
    assert not result.success
    assert checks(result)[TIMES_CHECK] is False
    assert not result.asset_materializations_for_node("user_events")
    assert lakehouse.version(USER_EVENTS) == version
    assert lakehouse.count(USER_EVENTS) == 1
    # The staged batch stays readable for inspection, where the metadata says.
    assert lakehouse.count(STAGING, where=eq("batch_id", "bad")) == 2


@pytest.mark.long_on_delta_spark
def test_publishing_alone_audits_again_and_refuses_a_damaged_stage(
    lakehouse, write_batch, run_batch
):
    """A staged batch altered after its audit (here: a key stored twice) is never
    published by a run of `user_events` alone, and the count audit sees the change."""
    write_batch("b1", [event("e1"), event("e2")])
    assert run_batch("b1", assets=[user_events_staging]).success
    stage = lakehouse.read_arrow(STAGING, where=eq("batch_id", "b1"))
    lakehouse.append(STAGING, stage.slice(0, 1), metadata={"test": "damage"})
    audited = audits(lakehouse, ["b1"], EventSettings())["b1"]
    assert (audited.duplicated_keys, audited.keys_pass) == (1, False)
    counted = {r.check_name: r.passed for r in audited.results(batch_rows=2)}
    assert counted == {KEYS_CHECK: False, TIMES_CHECK: True, COUNT_CHECK: False}
    result = run_batch("b1", assets=[user_events])
    assert not result.success
    failures = [str(e.event_specific_data.error) for e in result.all_events if e.is_step_failure]
    assert any("batch b1 fails its audits (keys: 0 null, 1 duplicated" in f for f in failures)
    assert not lakehouse.exists(USER_EVENTS)


@pytest.mark.long_on_delta_spark  # quotes in predicates on Spark: the port's contract tests
def test_a_batch_id_with_quotes_and_spaces_is_its_own_partition(lakehouse, write_batch, run_batch):
    write_batch("b1", [event("e1")])
    write_batch("it's \\ b1", [event("e2")])
    assert run_batch("b1").success
    assert run_batch("it's \\ b1").success
    staged = lakehouse.read_arrow(STAGING, columns=["batch_id", "event_id"]).to_pylist()
    assert sorted((r["batch_id"], r["event_id"]) for r in staged) == [
        ("b1", "e1"),
        ("it's \\ b1", "e2"),
    ]
    assert lakehouse.count(USER_EVENTS) == 2


@pytest.mark.long_on_delta_spark
def test_replaying_a_batch_leaves_the_table_as_it_was(lakehouse, write_batch, run_batch):
    write_batch("b1", [event("e1"), event("e2", ts="2024-05-03T10:00:00+00:00")])
    assert run_batch("b1").success
    before = sorted(map(str, lakehouse.read_arrow(USER_EVENTS).to_pylist()))
    assert run_batch("b1").success
    assert sorted(map(str, lakehouse.read_arrow(USER_EVENTS).to_pylist())) == before


def test_the_sensor_registers_batches_and_launches_each_content_once(
    landing, lakehouse, instance, write_batch
):
    write_batch("b1", [event("e1")])
    write_batch("b2", [event("e2")])
    (Path(landing.root) / "events" / "nested").mkdir()
    (Path(landing.root) / "events" / "nested" / "x.jsonl").write_text("{}\n")

    def tick(cursor: str | None) -> dg.SensorResult:
        with dg.build_sensor_context(
            instance=instance, cursor=cursor, resources=sensor_resources(landing)
        ) as context:
            return event_batch_files(context)

    first = tick(None)
    (together,) = first.run_requests  # the batches new to a tick: one run
    assert (together.partition_key, together.tags) == (None, partition_range("b1", "b2"))
    assert first.dynamic_partitions_requests[0].partition_keys == ["b1", "b2"]
    instance.add_dynamic_partitions(event_batches.name, ["b1", "b2"])
    # Re-notified, unchanged: nothing. Changed: that batch again, under a new run key.
    assert tick(first.cursor).run_requests == []
    write_batch("b1", [event("e1"), event("e3")])
    again = tick(first.cursor)
    assert [r.partition_key for r in again.run_requests] == ["b1"]
    assert again.run_requests[0].run_key != together.run_key
    assert again.dynamic_partitions_requests == []


def test_the_batches_new_to_a_tick_are_one_run_and_a_bad_one_fails_alone(
    landing, lakehouse, instance, write_batch, resources
):
    """Three batches land between two ticks: one run stages, audits and publishes them,
    each in commits of its own. When one fails its audit, nothing of that run is
    published, and the next tick asks for each batch alone: the two good ones land, the
    bad one fails alone, and nothing is asked for again after that."""
    write_batch("b1", [event("e1")])
    write_batch("b2", [event("e2"), event("e3", ts="1999-12-31T23:59:59+00:00")])
    write_batch("b3", [event("e4"), event("e5")])
    job = dg.Definitions(
        assets=[user_events_staging, user_events],
        jobs=[event_batch_job],
        resources={**resources, "event_settings": EventSettings()},
    ).resolve_job_def(event_batch_job.name)

    def tick(cursor: str | None) -> dg.SensorResult:
        with dg.build_sensor_context(
            instance=instance, cursor=cursor, resources=sensor_resources(landing)
        ) as context:
            return event_batch_files(context)

    def run(request: dg.RunRequest) -> dg.ExecuteInProcessResult:
        return job.execute_in_process(
            instance=instance,
            partition_key=request.partition_key,
            tags={**request.tags, "dagster/sensor_name": event_batch_files.name},
            raise_on_error=False,
        )

    first = tick(None)
    (together,) = first.run_requests
    assert together.tags == partition_range("b1", "b3")
    instance.add_dynamic_partitions(event_batches.name, ["b1", "b2", "b3"])
    result = run(together)
    assert not result.success
    # The run of a tick's batches leaves the queue ahead of the other sensors' runs.
    assert result.dagster_run.tags["dagster/priority"] == "1"
    (times,) = [e for e in result.get_asset_check_evaluations() if e.check_name == TIMES_CHECK]
    assert not times.passed and list(times.metadata["failed_batches"].value) == ["b2"]
    assert not lakehouse.exists(USER_EVENTS)
    staged = result.asset_materializations_for_node("user_events_staging")
    assert sorted(m.partition for m in staged) == ["b1", "b2", "b3"]
    assert len({m.metadata["delta_version"].value for m in staged}) == 3

    second = tick(first.cursor)
    assert sorted(r.partition_key for r in second.run_requests) == ["b1", "b2", "b3"]
    landed = {r.partition_key: run(r).success for r in second.run_requests}
    assert landed == {"b1": True, "b2": False, "b3": True}
    events = lakehouse.read_arrow(USER_EVENTS, columns=["event_id"]).column(0).to_pylist()
    assert sorted(events) == ["e1", "e4", "e5"]
    assert tick(second.cursor).run_requests == []


def test_a_run_of_batches_refuses_a_bad_one_alone_as_a_run_of_it_would(
    landing, lakehouse, instance, write_batch, resources, run_batch
):
    """A run's batches are read in one Spark pass: a batch with a bad line, or an empty
    one, is refused with the error a run of it alone gives, and the others are staged."""
    write_batch("b1", [event("e1")])
    bad = write_batch("b2", [event("e2")])
    bad.write_text(bad.read_text() + "{not json\n")
    write_batch("b3", [event("e3"), event("e4")])
    (Path(landing.root) / batch_file("b4")).write_bytes(b"")
    instance.add_dynamic_partitions(event_batches.name, ["b1", "b2", "b3", "b4"])
    together = dg.materialize(
        [user_events_staging],
        resources={**resources, "event_settings": EventSettings()},
        instance=instance,
        tags=partition_range("b1", "b4"),
        raise_on_error=False,
    )

    assert not together.success
    assert instance.get_materialized_partitions(user_events_staging.key) == {"b1", "b3"}
    assert {b: a.rows for b, a in audits(lakehouse, ["b1", "b3"], EventSettings()).items()} == {
        "b1": 1,
        "b3": 2,
    }
    (failure,) = together.get_step_failure_events()
    refused = failure.step_failure_data.user_failure_data.metadata["failed"].data
    for batch_id in ("b2", "b4"):
        (alone,) = run_batch(batch_id, assets=[user_events_staging]).get_step_failure_events()
        assert refused[batch_id] == alone.step_failure_data.error.message.strip().split(": ", 1)[1]
    assert "events/b2.jsonl:2: malformed JSON" in refused["b2"]
    assert "events/b4.jsonl: file is empty" in refused["b4"]


def test_a_run_stages_each_batch_as_a_run_of_it_alone_whatever_its_group(
    landing, lakehouse, instance, write_batch, resources, monkeypatch
):
    """A run deduplicates its batches a group at a time (consecutive batches whose files
    add up to `DEDUPLICATED_TOGETHER_BYTES`): each batch keeps its own newest version of
    an event, also of one another batch of the run holds, in whichever group it falls."""
    later = {"ingestion_time": "2024-05-03T00:00:00+00:00"}
    sizes = [
        write_batch("b1", [event("e1"), event("e1", page="/v2") | later, event("e2")]),
        write_batch("b2", [event("e1", page="/b2")]),
        write_batch("b3", [event("e2", page="/b3"), event("e3")]),
    ]
    together = sizes[0].stat().st_size + sizes[1].stat().st_size
    # The module, which the package's `user_events` (the asset) hides.
    module = sys.modules["assets.warehouse.user_events"]
    monkeypatch.setattr(module, "DEDUPLICATED_TOGETHER_BYTES", together)
    instance.add_dynamic_partitions(event_batches.name, ["b1", "b2", "b3"])
    result = dg.materialize(
        [user_events_staging],
        resources={**resources, "event_settings": EventSettings()},
        instance=instance,
        tags=partition_range("b1", "b3"),
    )

    assert result.success
    staged = lakehouse.read_arrow(STAGING, columns=["batch_id", "event_id", "payload"])
    assert sorted(
        (row["batch_id"], row["event_id"], json.loads(row["payload"])["page"])
        for row in staged.to_pylist()
    ) == [
        ("b1", "e1", "/v2"),
        ("b1", "e2", "/"),
        ("b2", "e1", "/b2"),
        ("b3", "e2", "/b3"),
        ("b3", "e3", "/"),
    ]
    staged_rows = {
        m.partition: m.metadata["staged_rows"].value
        for m in result.asset_materializations_for_node("user_events_staging")
    }
    assert staged_rows == {"b1": 2, "b2": 1, "b3": 2}
