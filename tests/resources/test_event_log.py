"""The instance's SQLite event log with its connections kept open (resources/event_log.py):
what it stores is Dagster's own storage's, read the same by any process, followed live by
a watcher (the UI's view of a running run), and it holds a bounded number of files open."""

import logging
import os
import threading
import time
import uuid
from pathlib import Path

import dagster as dg
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log import SqliteEventLogStorage
from support import instance_home

from resources.event_log import OPEN_DATABASES, KeptConnectionsEventLogStorage

DAYS = [f"2024-03-0{day}" for day in range(1, 8)]  # more runs than databases kept open


@dg.asset(partitions_def=dg.DailyPartitionsDefinition(start_date="2024-03-01"))
def daily(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"day": context.partition_key})


def open_databases(folder: Path) -> set[str]:
    """The files under `folder` this process holds open."""
    held = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed since the listing
        if target.startswith(str(folder)):
            held.add(target)
    return held


def test_runs_stored_with_kept_connections_read_the_same_in_dagsters_own_storage(tmp_path):
    home = instance_home(tmp_path / "dagster")
    events = home / "history" / "runs"
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert isinstance(instance.event_log_storage, KeptConnectionsEventLogStorage)
        for day in DAYS:
            assert dg.materialize([daily], instance=instance, partition_key=day).success
        # The index and the last runs' databases stay open, never one per run.
        held = {Path(name).name for name in open_databases(events) if name.endswith(".db")}
        assert "index.db" in held and len(held) <= OPEN_DATABASES
        kept = instance.fetch_materializations(daily.key, limit=100).records
    # Another process reading with Dagster's own storage (the UI, `dagster` commands).
    plain = SqliteEventLogStorage(str(events))
    records = plain.fetch_materializations(daily.key, limit=100).records
    assert sorted(record.partition_key for record in records) == DAYS
    assert [r.storage_id for r in records] == [r.storage_id for r in kept]
    assert {r.partition_key: r.asset_materialization.metadata["day"].value for r in records} == {
        day: day for day in DAYS
    }
    planned = plain.get_event_records(
        dg.EventRecordsFilter(dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED, daily.key)
    )
    assert len(planned) == len(DAYS)
    plain.dispose()


def test_a_watcher_sees_each_event_of_a_running_run_as_it_is_stored(tmp_path):
    """The UI follows a run by watching its database file change: each event stored by a
    run process (kept connections) reaches a watcher in another storage (the UI's)."""
    folder = str(tmp_path / "runs")
    writer = KeptConnectionsEventLogStorage(folder)
    watcher = SqliteEventLogStorage(folder)
    run_id = str(uuid.uuid4())
    seen: list[str] = []
    arrived = threading.Event()

    def on_event(entry: EventLogEntry, cursor: str) -> None:
        seen.append(entry.user_message)
        arrived.set()

    def store(message: str) -> None:
        writer.store_event(
            EventLogEntry(
                error_info=None,
                level=logging.INFO,
                user_message=message,
                run_id=run_id,
                timestamp=time.time(),
            )
        )

    store("first")  # the run's database exists before it is watched, as in a run
    watcher.watch(run_id, None, on_event)
    try:
        for message in ("second", "third"):
            arrived.clear()
            store(message)
            assert arrived.wait(timeout=10), f"the watcher never saw {message!r}: {seen}"
        deadline = time.monotonic() + 10
        while seen[-1:] != ["third"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert seen == ["first", "second", "third"]
    finally:
        watcher.end_watch(run_id, on_event)
        watcher.dispose()
        writer.dispose()


def test_wiping_the_instance_closes_its_databases_and_stores_anew(tmp_path):
    home = instance_home(tmp_path / "dagster")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert dg.materialize([daily], instance=instance, partition_key=DAYS[0]).success
        instance.wipe()
        assert not instance.fetch_materializations(daily.key, limit=10).records
        assert dg.materialize([daily], instance=instance, partition_key=DAYS[1]).success
        records = instance.fetch_materializations(daily.key, limit=10).records
        assert [record.partition_key for record in records] == [DAYS[1]]
