"""What the file sensors remember between ticks lives in the `sensor_file_state` control
table; their cursors stay a few bytes whatever the number of files, and a tick whose
cursor Dagster never stored is evaluated again from the same state."""

from __future__ import annotations

import json
import os
from pathlib import Path

import dagster as dg
import pytest
from deltalake import DeltaTable
from support import sensor_resources

from assets.warehouse import event_batches
from resources.lakehouse.predicates import eq
from sensors import file_state
from sensors.event_batches import event_batch_files

SENSOR = event_batch_files.name


@pytest.fixture
def tick(instance, landing):
    resources = sensor_resources(landing)

    def evaluate(cursor: str | None) -> dg.SensorResult:
        with dg.build_sensor_context(
            instance=instance, cursor=cursor, resources=resources
        ) as context:
            result = event_batch_files(context)
        new = [k for r in result.dynamic_partitions_requests for k in r.partition_keys]
        instance.add_dynamic_partitions(event_batches.name, new)
        return result

    return evaluate


@pytest.fixture
def land(landing):
    def write(batch_id: str, body: str = '{"event_id": "e"}\n') -> Path:
        path = Path(landing.root) / "events" / f"{batch_id}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
        return path

    return write


def state_rows(landing) -> list[dict]:
    lakehouse = sensor_resources(landing)["lakehouse"].in_process()
    return lakehouse.read_arrow(file_state.TABLE, where=eq("sensor", SENSOR)).to_pylist()


def state_version(landing) -> int | None:
    return sensor_resources(landing)["lakehouse"].in_process().version(file_state.TABLE)


def test_the_cursor_stays_small_while_the_state_grows(tick, land, landing):
    for i in range(300):
        land(f"batch-{i:04d}")
    first = tick(None)
    assert len(first.run_requests) == 300
    assert json.loads(first.cursor) == {"state_version": 0, "files": 300}
    rows = state_rows(landing)
    assert len(rows) == 300
    assert {r["path"] for r in rows} == {f"events/batch-{i:04d}.jsonl" for i in range(300)}
    for i in range(300, 600):
        land(f"batch-{i:04d}")
    second = tick(first.cursor)
    assert len(second.run_requests) == 300
    assert json.loads(second.cursor) == {"state_version": 1, "files": 600}
    assert len(second.cursor) == len(first.cursor)


def test_a_tick_that_changes_nothing_commits_nothing(tick, land, landing):
    land("b1")
    first = tick(None)
    version = state_version(landing)
    path = Path(landing.root) / "events" / "b1.jsonl"
    os.utime(path, ns=(path.stat().st_mtime_ns,) * 2)  # re-notified, same mtime
    again = tick(first.cursor)
    assert again.run_requests == [] and again.cursor == first.cursor
    assert state_version(landing) == version


def test_a_tick_whose_cursor_was_not_stored_asks_for_the_same_runs(tick, land):
    """The daemon evaluated a tick, wrote the sensor's state, and died before storing the
    cursor: the next tick starts from the old cursor, and must find the same work."""
    land("b1")
    stored = tick(None).cursor
    land("b2")
    land("b1", '{"event_id": "changed"}\n')
    lost = tick(stored)
    retried = tick(stored)
    assert sorted(r.run_key for r in retried.run_requests) == sorted(
        r.run_key for r in lost.run_requests
    )
    assert sorted(r.partition_key for r in retried.run_requests) == ["b1", "b2"]
    assert tick(retried.cursor).run_requests == []


def test_a_cursor_that_points_at_no_state_starts_afresh_and_asks_for_no_new_run(
    tick, land, landing
):
    """A cursor that is not a pointer into the table (reset by hand, or from another
    version of the sensor) is read as no state: the files are hashed again, and the runs
    asked for carry the run keys they had, so Dagster launches none of them again."""
    land("b1")
    first = tick(None)
    result = tick(json.dumps({"something": "else"}))
    assert [r.run_key for r in result.run_requests] == [r.run_key for r in first.run_requests]
    assert json.loads(result.cursor)["files"] == 1


def test_a_version_whose_log_was_cleaned_up_falls_back_to_the_latest_state(tick, land, landing):
    """Delta removes log entries older than its retention once a checkpoint covers them:
    a cursor pointing at such a version reads the latest state (only this sensor writes
    its partition) instead of failing every tick."""
    land("b1")
    first = tick(None)
    land("b2")
    second = tick(first.cursor)
    table = Path(landing.root).parent / "lakehouse" / file_state.TABLE
    DeltaTable(str(table)).create_checkpoint()
    (table / "_delta_log" / "00000000000000000000.json").unlink()
    result = tick(first.cursor)
    assert result.run_requests == []  # b2 was already requested by the lost tick
    assert result.cursor == second.cursor
