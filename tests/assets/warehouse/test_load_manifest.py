"""The load manifest on both engines: every move NEW -> PROCESSED -> LOADED, replays,
to_skip, an unknown event type, bad values, and the two sensors (registration of finished
run directories only, recovery of stuck runs)."""

from __future__ import annotations

import datetime as dt
import json
import signal
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from support import DELTA_JARS
from ticks import evaluate_tick

from assets.warehouse import (
    ManifestSettings,
    enriched_run_job,
    enriched_runs,
    shredded_events,
    skip_enriched_run,
    warehouse_events,
)
from assets.warehouse.manifest import load_manifest as manifest
from assets.warehouse.manifest.enriched import SUCCESS, run_folder
from assets.warehouse.manifest.loader import DEFAULT_EVENT_TABLES, load, warehouse_table
from assets.warehouse.manifest.shredder import shred, stage_path, stage_table
from resources import Lakehouse
from resources.lakehouse.predicates import eq
from sensors import requested_again
from sensors.enriched_runs import enriched_run_directories, stuck_enriched_runs

RUN_A, RUN_B = "2024-05-01-10-00-00", "2024-05-01-11-00-00"
META = {"test": "load_manifest"}


def page_view(event_id: str, url: str = "/home") -> dict:
    return {
        "event_type": "page_view",
        "event_id": event_id,
        "user_id": "u1",
        "event_timestamp": "2024-05-01T09:59:00+02:00",
        "page_url": url,
        "referrer": None,
    }


def purchase(event_id: str, amount: str = "12.50") -> dict:
    return {
        "event_type": "purchase",
        "event_id": event_id,
        "user_id": "u1",
        "event_timestamp": "2024-05-01T08:00:00Z",
        "order_id": f"o-{event_id}",
        "amount": amount,
        "currency": "EUR",
    }


def click(event_id: str) -> dict:
    return {
        "event_type": "link_click",
        "event_id": event_id,
        "user_id": "u2",
        "event_timestamp": "2024-05-01T08:00:01Z",
        "target_url": "https://example.com/a?b='c'",
    }


@pytest.fixture
def write_run(landing):
    """Write a run directory: files of JSON lines, then (unless told not to) `_SUCCESS`."""

    def write(run_id: str, files: dict[str, list[dict]], *, finished: bool = True) -> Path:
        folder = Path(landing.root) / run_folder(run_id)
        folder.mkdir(parents=True, exist_ok=True)
        for name, events in files.items():
            (folder / name).write_text("".join(json.dumps(e) + "\n" for e in events))
        if finished:
            (folder / SUCCESS).write_text("")
        return folder

    return write


@pytest.fixture
def run_job(resources, instance):
    def run(
        run_ids: list[str], *, tables: dict[str, str] | None = None, assets=None
    ) -> dg.ExecuteInProcessResult:
        instance.add_dynamic_partitions(enriched_runs.name, run_ids)
        settings = ManifestSettings(event_tables=tables or DEFAULT_EVENT_TABLES)
        return dg.materialize(
            list(assets or (shredded_events, warehouse_events)),
            partition_key=run_ids[0] if len(run_ids) == 1 else None,
            tags=(
                {}
                if len(run_ids) == 1
                else {
                    "dagster/asset_partition_range_start": run_ids[0],
                    "dagster/asset_partition_range_end": run_ids[-1],
                }
            ),
            resources={**resources, "manifest_settings": settings},
            instance=instance,
            raise_on_error=False,
        )

    return run


def warehouse_rows(lakehouse, event_type: str) -> list[dict]:
    rows = lakehouse.read_arrow(warehouse_table(event_type)).to_pylist()
    return sorted(rows, key=lambda r: (r["run_id"], r["event_id"]))


def state(lakehouse, run_id: str) -> manifest.ManifestRow:
    return manifest.read(lakehouse, [run_id])[run_id]


@pytest.mark.long_on_delta_spark
def test_a_run_moves_new_processed_loaded(lakehouse, landing, spark, write_run):
    write_run(
        RUN_A, {"part-0.json": [page_view("p1"), purchase("b1")], "part-1.json": [click("c1")]}
    )
    steps = []
    shredded = shred(
        spark.session(),
        lakehouse,
        landing,
        [RUN_A],
        by="run-1",
        metadata=META,
        on_step=steps.append,
    )
    assert steps == ["added", "staged", "stage_success", "processed"]
    row = state(lakehouse, RUN_A)
    assert (row.state, row.event_types, row.events) == (
        manifest.PROCESSED,
        ("link_click", "page_view", "purchase"),
        3,
    )
    assert row.stage_path == lakehouse.uri(stage_path(RUN_A))
    assert [f.events_by_type for f in shredded.staged] == [
        {"page_view": 1, "purchase": 1, "link_click": 1}
    ]
    assert lakehouse.read_marker(f"{stage_path(RUN_A)}/{SUCCESS}") is not None
    assert lakehouse.count(stage_table("purchase"), where=eq("run_id", RUN_A)) == 1

    loaded = load(
        spark.session(), lakehouse, [RUN_A], DEFAULT_EVENT_TABLES, by="run-2", metadata=META
    )
    assert loaded.loaded == [RUN_A]
    assert state(lakehouse, RUN_A).state == manifest.LOADED
    [bought] = warehouse_rows(lakehouse, "purchase")
    assert (bought["event_id"], str(bought["amount"]), bought["currency"], bought["run_id"]) == (
        "b1",
        "12.50",
        "EUR",
        RUN_A,
    )
    [viewed] = warehouse_rows(lakehouse, "page_view")
    assert viewed["event_timestamp"] == dt.datetime(2024, 5, 1, 7, 59, tzinfo=dt.UTC)
    assert "event_type" not in viewed
    [clicked] = warehouse_rows(lakehouse, "link_click")
    assert clicked["target_url"] == "https://example.com/a?b='c'"


def test_replays_and_copies_change_nothing(lakehouse, write_run, run_job):
    copy = page_view("p1")
    write_run(RUN_A, {"a.json": [copy, purchase("b1")], "b.json": [copy]})
    assert run_job([RUN_A]).success
    versions = {t: lakehouse.version(warehouse_table(t)) for t in ("page_view", "purchase")}
    before = {t: warehouse_rows(lakehouse, t) for t in versions}
    assert len(before["page_view"]) == 1  # two identical copies are one event
    manifest_version = lakehouse.version(manifest.LOAD_MANIFEST)
    replay = run_job([RUN_A])
    assert replay.success
    assert lakehouse.version(manifest.LOAD_MANIFEST) == manifest_version
    assert {t: lakehouse.version(warehouse_table(t)) for t in versions} == versions
    assert {t: warehouse_rows(lakehouse, t) for t in versions} == before
    loaded = replay.asset_materializations_for_node("warehouse_events")[0].metadata
    assert loaded["already_loaded"].value == RUN_A


@pytest.mark.long_on_delta_spark
def test_a_backlog_loads_in_one_run(lakehouse, write_run, run_job):
    write_run(RUN_A, {"a.json": [page_view("p1")]})
    write_run(RUN_B, {"a.json": [page_view("p2"), purchase("b2")]})
    result = run_job([RUN_A, RUN_B])
    assert result.success
    assert {r.state for r in manifest.read(lakehouse).values()} == {manifest.LOADED}
    assert [(r["run_id"], r["event_id"]) for r in warehouse_rows(lakehouse, "page_view")] == [
        (RUN_A, "p1"),
        (RUN_B, "p2"),
    ]


@pytest.mark.long_on_delta_spark
def test_a_run_flagged_to_skip_is_never_processed_or_loaded(
    lakehouse, write_run, run_job, resources, instance
):
    write_run(RUN_A, {"a.json": [page_view("p1")]})
    write_run(RUN_B, {"a.json": [page_view("p2")]})
    flagged = skip_enriched_run.execute_in_process(
        run_config={
            "ops": {"flag_enriched_run": {"config": {"run_id": RUN_A, "reason": "bad upstream"}}}
        },
        resources={"lakehouse": resources["lakehouse"]},
        instance=instance,
    )
    assert flagged.success
    assert run_job([RUN_A]).success
    assert run_job([RUN_B]).success
    row = state(lakehouse, RUN_A)
    assert (row.state, row.to_skip, row.skip_reason) == (manifest.NEW, True, "bad upstream")
    assert [r["run_id"] for r in warehouse_rows(lakehouse, "page_view")] == [RUN_B]
    assert not lakehouse.exists(stage_table("page_view")) or not lakehouse.count(
        stage_table("page_view"), where=eq("run_id", RUN_A)
    )
    # A LOADED run cannot be skipped any more: its rows are in the warehouse.
    refused = skip_enriched_run.execute_in_process(
        run_config={"ops": {"flag_enriched_run": {"config": {"run_id": RUN_B}}}},
        resources={"lakehouse": resources["lakehouse"]},
        instance=instance,
        raise_on_error=False,
    )
    assert not refused.success
    assert "already LOADED" in str(refused.get_step_failure_events()[0].event_specific_data.error)
    assert state(lakehouse, RUN_B).to_skip is False
    not_an_id = skip_enriched_run.execute_in_process(
        run_config={"ops": {"flag_enriched_run": {"config": {"run_id": "2024'/../x"}}}},
        resources={"lakehouse": resources["lakehouse"]},
        instance=instance,
        raise_on_error=False,
    )
    assert "is not a run id" in str(
        not_an_id.get_step_failure_events()[0].event_specific_data.error
    )
    assert set(manifest.read(lakehouse)) == {RUN_A, RUN_B}


@pytest.mark.long_on_delta_spark
def test_an_unknown_event_type_refuses_its_run_and_names_the_type(lakehouse, write_run, run_job):
    signup = {"event_type": "signup", "event_id": "s1", "plan": "pro"}
    write_run(RUN_A, {"a.json": [page_view("p1"), signup]})
    write_run(RUN_B, {"a.json": [page_view("p2")]})
    result = run_job([RUN_A, RUN_B])
    assert not result.success
    error = str(result.get_step_failure_events()[0].event_specific_data.error)
    assert f"run {RUN_A}: event type 'signup' has no table definition" in error
    assert state(lakehouse, RUN_A).state == manifest.PROCESSED
    assert state(lakehouse, RUN_B).state == manifest.LOADED
    assert [r["run_id"] for r in warehouse_rows(lakehouse, "page_view")] == [RUN_B]
    # With a definition for the type, the refused run loads.
    tables = {**DEFAULT_EVENT_TABLES, "signup": "event_id string, plan string"}
    assert run_job([RUN_A], tables=tables, assets=[warehouse_events]).success
    assert state(lakehouse, RUN_A).state == manifest.LOADED
    assert [r["plan"] for r in warehouse_rows(lakehouse, "signup")] == ["pro"]


@pytest.mark.long_on_delta_spark
def test_a_value_of_another_type_is_named_by_file_line_and_field(lakehouse, write_run, run_job):
    write_run(RUN_A, {"a.json": [purchase("b1"), purchase("b2", amount="lots")]})
    result = run_job([RUN_A])
    assert not result.success
    error = str(result.get_step_failure_events()[0].event_specific_data.error)
    assert f"{run_folder(RUN_A)}/a.json:2: field 'amount' is STRING, not decimal(18,2)" in error
    assert not lakehouse.exists(warehouse_table("purchase"))


@pytest.mark.long_on_delta_spark
@pytest.mark.parametrize(
    ("files", "problem"),
    [
        ({"a.json": "{oops\n"}, "a.json:1: malformed JSON"),
        (
            {"a.json": json.dumps({"event_id": "x"}) + "\n"},
            "a.json:1: missing required field 'event_type'",
        ),
        (
            {"a.json": json.dumps({"event_type": "../x", "event_id": "x"}) + "\n"},
            "a.json:1: event_type '../x' is not a name",
        ),
        ({"a.json": ""}, "a.json: file is empty"),
    ],
    ids=["malformed", "no-type", "type-with-path", "empty"],
)
def test_bad_lines_stage_nothing_and_are_named(
    lakehouse, landing, write_run, run_job, files, problem
):
    folder = write_run(RUN_A, {})
    for name, text in files.items():
        (folder / name).write_text(text)
    result = run_job([RUN_A])
    assert not result.success
    assert problem in str(result.get_step_failure_events()[0].event_specific_data.error)
    assert state(lakehouse, RUN_A).state == manifest.NEW
    assert not lakehouse.exists(stage_table("page_view"))


def test_conflicting_copies_of_one_event_are_refused(lakehouse, write_run, run_job):
    write_run(RUN_A, {"a.json": [page_view("p1", "/a"), page_view("p1", "/b")]})
    result = run_job([RUN_A])
    assert not result.success
    assert "event_id 'p1' has 2 different contents" in str(
        result.get_step_failure_events()[0].event_specific_data.error
    )


def test_the_sensor_registers_finished_directories_once(write_run, landing, lakehouse, instance):
    write_run(RUN_A, {"a.json": [page_view("p1")]})
    write_run(RUN_B, {"a.json": [page_view("p2")]}, finished=False)
    misnamed = Path(landing.root) / "enriched" / "run=yesterday"
    misnamed.mkdir()
    (misnamed / SUCCESS).write_text("")
    cursor = None

    def tick():
        nonlocal cursor
        resources = {"landing": landing, "lakehouse": lakehouse}
        result = evaluate_tick(enriched_run_directories, instance, cursor, resources)
        cursor = result.cursor
        return result

    first = tick()
    assert [(r.partition_key, r.run_key) for r in first.run_requests] == [
        (RUN_A, f"enriched:{RUN_A}")
    ]
    assert first.dynamic_partitions_requests[0].partition_keys == [RUN_A]
    assert tick().run_requests == []
    (Path(landing.root) / run_folder(RUN_B) / SUCCESS).write_text("")
    assert [r.partition_key for r in tick().run_requests] == [RUN_B]
    assert tick().run_requests == []


@pytest.mark.long_on_delta_spark
def test_stuck_runs_are_requested_again_once_per_state(lakehouse, instance):
    manifest.add(lakehouse, [RUN_A, RUN_B, "2024-05-01-12-00-00"], by="test", metadata=META)
    manifest.flag_to_skip(lakehouse, RUN_B, reason="", by="test", metadata=META)

    def tick(minutes: int):
        settings = ManifestSettings(stuck_after_minutes=minutes)
        with dg.build_sensor_context(
            instance=instance, resources={"lakehouse": lakehouse, "manifest_settings": settings}
        ) as context:
            return stuck_enriched_runs(context)

    assert tick(30).run_requests == []  # not stuck yet
    requests = tick(0).run_requests
    assert [r.partition_key for r in requests] == [RUN_A, "2024-05-01-12-00-00"]
    since = state(lakehouse, RUN_A).state_since.isoformat()
    assert requests[0].run_key == f"recover:{RUN_A}:NEW:{since}"


def test_runs_of_either_sensor_that_failed_on_something_else_are_asked_for_again(
    resources, instance, landing, lakehouse, write_run, tmp_path, monkeypatch
):
    """A load or a recovery that failed on something other than its data is asked for
    again by the sensor that asked for it (the recovery's key names the stuck state,
    which a failed run leaves as it was); one refused for its data is not."""
    monkeypatch.setattr(requested_again, "FIRST_BACKOFF", 0.0)  # no minute's wait here
    write_run(RUN_A, {"a.json": [page_view("p1")]})
    write_run(RUN_B, {"a.json": [page_view("p2", "/a"), page_view("p2", "/b")]})
    instance.add_dynamic_partitions(enriched_runs.name, [RUN_A, RUN_B])
    (tmp_path / "blocked").write_text("a file where the lakehouse's folder should be")
    broken = Lakehouse(root=str(tmp_path / "blocked" / "lake"), engine="delta-rs")
    sensors = {"landing": landing, "lakehouse": lakehouse}
    stuck = {"lakehouse": lakehouse, "manifest_settings": ManifestSettings()}
    cursors = {
        sensor.name: evaluate_tick(sensor, instance, None, given).cursor
        for sensor, given in ((enriched_run_directories, sensors), (stuck_enriched_runs, stuck))
    }

    def run(run_id: str, lake: Lakehouse, sensor: dg.SensorDefinition) -> str:
        result = (
            dg.Definitions(
                assets=[shredded_events, warehouse_events],
                jobs=[enriched_run_job],
                resources={**resources, "lakehouse": lake, "manifest_settings": ManifestSettings()},
            )
            .resolve_job_def(enriched_run_job.name)
            .execute_in_process(
                instance=instance,
                partition_key=run_id,
                tags={"dagster/sensor_name": sensor.name},
                raise_on_error=False,
            )
        )
        assert not result.success
        return result.run_id

    def again(sensor: dg.SensorDefinition, given: dict) -> list[tuple[str | None, str | None]]:
        result = evaluate_tick(sensor, instance, cursors[sensor.name], given)
        return [(r.run_key, r.partition_key) for r in result.run_requests]

    loaded = run(RUN_A, broken, enriched_run_directories)
    assert again(enriched_run_directories, sensors) == [(f"again:{loaded}", RUN_A)]
    recovered = run(RUN_A, broken, stuck_enriched_runs)
    run(RUN_B, lakehouse, stuck_enriched_runs)  # refused: one event, two contents
    assert again(stuck_enriched_runs, stuck) == [(f"again:{recovered}", RUN_A)]
    # The recovery's run is newer than the load that failed: it takes that one's place.
    assert again(enriched_run_directories, sensors) == []


STATE_AFTER_KILL = {
    "added": manifest.NEW,
    "staged": manifest.NEW,  # stage written, no _SUCCESS: cleaned and staged again
    "stage_success": manifest.NEW,  # _SUCCESS written: promoted from the marker
    "processed": manifest.PROCESSED,
    "loaded link_click": manifest.PROCESSED,  # one of three tables loaded
    "loaded purchase": manifest.PROCESSED,  # every table loaded, not yet marked
}


# A fault trial per kill point, each a process that boots Spark: `make test-slow`.
@pytest.mark.slow
@pytest.mark.parametrize("kill_at", list(STATE_AFTER_KILL))
def test_a_crash_after_any_step_recovers_to_the_clean_tables(
    lakehouse, landing, spark, write_run, run_job, tmp_path, kill_at
):
    """SIGKILL of a real shredder/loader process (with its JVM) once a step is durable,
    then the job run again: the manifest ends LOADED and every table equals the one a
    clean run writes, without a duplicated row."""
    write_run(RUN_A, {"a.json": [page_view("p1"), purchase("b1")], "b.json": [click("c1")]})
    clean = Lakehouse(root=str(tmp_path / "clean"), engine=lakehouse.engine, spark=spark)
    shred(spark.session(), clean, landing, [RUN_A], by="clean", metadata=META)
    load(spark.session(), clean, [RUN_A], DEFAULT_EVENT_TABLES, by="clean", metadata=META)

    command = [sys.executable, str(Path(__file__).parents[2] / "manifest_crash.py")]
    command += ["--root", lakehouse.root, "--landing", landing.root, "--engine", lakehouse.engine]
    command += ["--jars", DELTA_JARS, "--kill-at", kill_at, RUN_A]
    crashed = subprocess.run(
        command, capture_output=True, text=True, timeout=600, start_new_session=True
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr
    assert state(lakehouse, RUN_A).state == STATE_AFTER_KILL[kill_at]

    result = run_job([RUN_A])
    assert result.success
    assert state(lakehouse, RUN_A).state == manifest.LOADED
    shredded = result.asset_materializations_for_node("shredded_events")[0].metadata
    if kill_at == "stage_success":
        assert shredded["promoted_runs"].value == RUN_A  # the marker's facts, nothing re-read
    for event_type in ("page_view", "purchase", "link_click"):
        assert warehouse_rows(lakehouse, event_type) == warehouse_rows(clean, event_type)
        staged = lakehouse.read_arrow(stage_table(event_type)).to_pylist()
        expected = clean.read_arrow(stage_table(event_type)).to_pylist()
        key = lambda r: (r["run_id"], r["event_id"])  # noqa: E731
        assert sorted(staged, key=key) == sorted(expected, key=key)
