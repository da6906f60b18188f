"""What the file sensors remember between ticks lives in the `sensor_files` control
table; their cursors stay a few bytes whatever the number of files, a tick looks at and
writes only the files that changed, and a tick whose cursor Dagster never stored is
evaluated again from the same state."""

from __future__ import annotations

import json
import os
from pathlib import Path

import dagster as dg
import pytest
from deltalake import DeltaTable
from support import partition_range, sensor_resources

from assets.warehouse import event_batches
from resources import LandingZone
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
    (batches,) = first.run_requests  # the batches new to a tick: one run
    assert batches.tags == partition_range("batch-0000", "batch-0299")
    cursor = json.loads(first.cursor)
    # Beside the state's version: where the sensor looks for failed runs from (a time).
    since = cursor.pop("failed_since")
    assert cursor == {"state_version": 0, "files": 300, "seq": 1}
    rows = state_rows(landing)
    assert len(rows) == 300
    assert {r["path"] for r in rows} == {f"events/batch-{i:04d}.jsonl" for i in range(300)}
    for i in range(300, 600):
        land(f"batch-{i:04d}")
    second = tick(first.cursor)
    (batches,) = second.run_requests
    assert batches.tags == partition_range("batch-0300", "batch-0599")
    assert json.loads(second.cursor) == {
        "state_version": 1,
        "files": 600,
        "seq": 2,
        "failed_since": since,  # no run failed
    }
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
    # Reset by hand, and a cursor of the sensor before its state was kept as changes
    # (a version of the former `sensor_file_state` table).
    for cursor in ({"something": "else"}, {"state_version": 0, "files": 1}):
        result = tick(json.dumps(cursor))
        assert [r.run_key for r in result.run_requests] == [r.run_key for r in first.run_requests]
        assert json.loads(result.cursor)["files"] == 1


def test_a_version_whose_log_was_cleaned_up_falls_back_to_the_latest_state(
    tick, land, landing, restart
):
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
    restart()  # a process that read nothing of the sensor's state yet
    result = tick(first.cursor)
    assert result.run_requests == []  # b2 was already requested by the lost tick
    assert result.cursor == second.cursor


def looked_at(landing, cursor: str | None) -> set[str] | None:
    """The paths a tick from `cursor` compares with the remembered state (None: all)."""
    lakehouse = sensor_resources(landing)["lakehouse"]
    folders = [("events", ".jsonl")]
    with dg.build_sensor_context(cursor=cursor) as context:
        return file_state.scan(SENSOR, context, lakehouse, landing, folders).looked_at


def test_a_tick_looks_at_and_appends_only_the_files_that_changed(tick, land, landing, restart):
    for i in range(200):
        land(f"batch-{i:04d}")
    first = tick(None)
    land("batch-0007", '{"event_id": "appended"}\n{"event_id": "again"}\n')
    land("new")
    (Path(landing.root) / "events" / "batch-0009.jsonl").unlink()
    assert looked_at(landing, first.cursor) == {
        f"events/{name}.jsonl" for name in ("batch-0007", "new", "batch-0009")
    }
    second = tick(first.cursor)
    assert sorted(r.partition_key for r in second.run_requests) == ["batch-0007", "new"]
    appended = [r for r in state_rows(landing) if r["seq"] == 2]
    assert {(r["path"], r["removed"]) for r in appended} == {
        ("events/batch-0007.jsonl", False),
        ("events/new.jsonl", False),
        ("events/batch-0009.jsonl", True),
    }
    # Read back by a process that never saw it, the appended state is the one in memory.
    remembered = file_state.load(sensor_resources(landing)["lakehouse"], SENSOR, second.cursor)
    restart()
    assert file_state.load(sensor_resources(landing)["lakehouse"], SENSOR, second.cursor) == (
        remembered
    )
    assert len(remembered.fingerprints) == 200
    assert tick(second.cursor).run_requests == []


def test_every_hundredth_write_rewrites_the_sensors_rows_one_per_file(tick, land, landing):
    land("b0")
    cursor = tick(None).cursor
    for i in range(1, file_state.COMPACT_AFTER_COMMITS + 1):
        land(f"b{i}")
        result = tick(cursor)
        assert [r.partition_key for r in result.run_requests] == [f"b{i}"]
        cursor = result.cursor
    rows = state_rows(landing)
    assert len(rows) == file_state.COMPACT_AFTER_COMMITS + 1
    assert {r["seq"] for r in rows} == {file_state.COMPACT_AFTER_COMMITS + 1}


def test_changes_the_notifications_name_are_seen_at_the_next_tick(tick, land, landing):
    """Written in place, appended to, replaced by a rename, removed with its folder: each
    is taken at the next tick without listing everything again."""
    events = Path(landing.root) / "events"
    for name in ("kept", "appended", "replaced", "removed"):
        land(name)
    (events / "nested").mkdir()
    (events / "nested" / "deep.jsonl").write_text("{}\n")
    first = tick(None)
    with (events / "appended.jsonl").open("a") as f:
        f.write('{"event_id": "more"}\n')
    (events / "_replaced.tmp").write_text('{"event_id": "new content"}\n')
    os.rename(events / "_replaced.tmp", events / "replaced.jsonl")
    (events / "removed.jsonl").unlink()
    second = tick(first.cursor)
    assert sorted(r.partition_key for r in second.run_requests) == ["appended", "replaced"]
    remembered = file_state.load(sensor_resources(landing)["lakehouse"], SENSOR, second.cursor)
    assert set(remembered.fingerprints) == {
        f"events/{name}.jsonl" for name in ("kept", "appended", "replaced")
    }
    # A new folder, and a file written in it before anyone could watch it.
    (events / "later").mkdir()
    (events / "later" / "x.jsonl").write_text("{}\n")
    land("fresh")
    third = tick(second.cursor)
    assert [r.partition_key for r in third.run_requests] == ["fresh"]
    assert tick(third.cursor).run_requests == []


@pytest.mark.parametrize("full_listing_seconds", [0, 600])
def test_a_restarted_process_and_a_full_listing_find_what_the_notifications_found(
    instance, tmp_path, restart, full_listing_seconds
):
    """A tick after a restart lists everything and compares every file with the table's
    state; so does every tick when notifications are off (0): the same runs and state."""
    landing = LandingZone(root=str(tmp_path / "landing"), full_listing_seconds=600)
    resources = sensor_resources(landing)
    events = Path(landing.root) / "events"
    events.mkdir(parents=True)
    for i in range(20):
        (events / f"b{i}.jsonl").write_text(f'{{"event_id": "{i}"}}\n')

    def evaluate(zone: LandingZone, cursor: str | None) -> dg.SensorResult:
        with dg.build_sensor_context(
            instance=instance, cursor=cursor, resources={**resources, "landing": zone}
        ) as context:
            return event_batch_files(context)

    first = evaluate(landing, None)
    (events / "b3.jsonl").write_text('{"event_id": "changed"}\n')
    (events / "b4.jsonl").unlink()
    (events / "b20.jsonl").write_text("{}\n")
    notified = evaluate(landing, first.cursor)
    restart()
    other = LandingZone(root=landing.root, full_listing_seconds=full_listing_seconds)
    listed = evaluate(other, first.cursor)
    assert sorted(r.run_key for r in listed.run_requests) == sorted(
        r.run_key for r in notified.run_requests
    )
    lakehouse = resources["lakehouse"]
    assert file_state.load(lakehouse, SENSOR, listed.cursor).fingerprints == (
        file_state.load(lakehouse, SENSOR, notified.cursor).fingerprints
    )


def test_a_folder_made_after_the_first_tick_is_followed(tick, landing):
    """A deployment starts its sensors before anything landed: the folder they watch is
    made later, and its files are taken at the tick after they land."""
    first = tick(None)
    assert first.run_requests == []
    events = Path(landing.root) / "events"
    events.mkdir(parents=True)
    (events / "b1.jsonl").write_text("{}\n")
    second = tick(first.cursor)
    assert [r.partition_key for r in second.run_requests] == ["b1"]
    (events / "b2.jsonl").write_text("{}\n")
    assert [r.partition_key for r in tick(second.cursor).run_requests] == ["b2"]


def test_a_state_table_from_before_entity_tags_is_read_and_gains_the_column(
    tick, land, landing, restart
):
    """Upgraded from a release whose `sensor_files` had no `etag`: its rows are read as
    they are, and the next write adds the column (earlier rows have it null)."""
    land("b1")
    first = tick(None)
    lakehouse = sensor_resources(landing)["lakehouse"].in_process()
    old_rows = lakehouse.read_arrow(file_state.TABLE).drop_columns(["etag"])
    lakehouse.overwrite(file_state.TABLE, old_rows, metadata={}, replace_schema=True)
    assert "etag" not in lakehouse.read_arrow(file_state.TABLE).column_names
    restart()
    cursor = json.dumps({**json.loads(first.cursor), "state_version": state_version(landing)})
    land("b2")
    second = tick(cursor)
    assert [r.partition_key for r in second.run_requests] == ["b2"]
    assert "etag" in lakehouse.read_arrow(file_state.TABLE).column_names
    assert {r["path"] for r in state_rows(landing)} >= {"events/b1.jsonl", "events/b2.jsonl"}
