"""Proxy: write-once device snapshots behind one access point that switches atomically."""

import datetime as dt
import threading
import uuid

import dagster as dg
import pyarrow as pa
import pytest

from assets.immutable import device_snapshot, point_device_snapshot
from assets.immutable.proxy import (
    SNAPSHOT_MANIFEST,
    SnapshotEntry,
    SnapshotError,
    WriteOnceError,
    manifest_entries,
    read_device_snapshot,
    register_device_snapshot_view,
    retire,
    snapshot_table,
    write_once,
)
from assets.maintenance import compact_tables, vacuum_table
from assets.updates.stateful_merger import CATALOG_SCHEMA, DEVICE_CATALOG

NOW = dt.datetime(2025, 3, 1, 12, tzinfo=dt.UTC)


def entry(name: str, *, age_hours: float, status: str, since_hours: float) -> SnapshotEntry:
    return SnapshotEntry(
        name,
        name,
        0,
        1,
        NOW - dt.timedelta(hours=age_hours),
        status,
        NOW - dt.timedelta(hours=since_hours),
    )


def test_retention_never_retires_the_current_the_newest_or_a_recent_one():
    entries = [
        entry("old", age_hours=100, status="kept", since_hours=90),
        entry("just-replaced", age_hours=80, status="kept", since_hours=1),
        entry("kept-newest", age_hours=50, status="kept", since_hours=40),
        entry("current", age_hours=40, status="current", since_hours=40),
    ]
    statuses = {
        e.snapshot: e.status for e in retire(entries, now=NOW, keep=2, grace=dt.timedelta(hours=24))
    }
    assert statuses == {
        "old": "retired",
        "just-replaced": "kept",  # stopped being current within the grace period
        "kept-newest": "kept",
        "current": "current",
    }
    assert {e.status for e in retire(entries, now=NOW, keep=0, grace=dt.timedelta(0))} == {
        "retired",
        "current",
    }


def catalog(lakehouse, ids: list[str]) -> None:
    rows = pa.Table.from_pylist(
        [
            {"id": i, "brand_name": "b", "full_name": f"device {i}", "processor_brand": "p"}
            for i in ids
        ],
        schema=CATALOG_SCHEMA,
    )
    lakehouse.overwrite(DEVICE_CATALOG, rows, metadata={"test": "catalog"})


def snapshot_ids(lakehouse) -> list[str]:
    return sorted(r["id"] for r in read_device_snapshot(lakehouse).select("id").collect())


def materialize(lakehouse, **config) -> dict:
    result = dg.materialize(
        [device_snapshot],
        resources={"lakehouse": lakehouse},
        run_config={"ops": {"device_snapshot": {"config": config}}} if config else None,
    )
    return result.asset_materializations_for_node("device_snapshot")[0].metadata


def test_a_write_once_table_refuses_a_second_write_and_stays_intact(lakehouse):
    table = snapshot_table("run-1")
    write_once(lakehouse, table, pa.table({"n": [1, 2]}), metadata={})
    with pytest.raises(WriteOnceError, match="'device_snapshot/run=run-1' already exists"):
        write_once(lakehouse, table, pa.table({"n": [3]}), metadata={})
    assert (lakehouse.version(table), lakehouse.count(table)) == (0, 2)
    with pytest.raises(SnapshotError):
        snapshot_table("../catalog")


@pytest.mark.long_on_delta_spark
def test_the_proxy_follows_new_snapshots_and_points_back(lakehouse, spark):
    with pytest.raises(SnapshotError, match="no current snapshot"):
        read_device_snapshot(lakehouse)
    catalog(lakehouse, ["a", "b"])
    first = materialize(lakehouse)
    catalog(lakehouse, ["a", "b", "c"])
    second = materialize(lakehouse)
    assert snapshot_ids(lakehouse) == ["a", "b", "c"]
    assert second["rows"].value == 3 and first["rows"].value == 2
    view = register_device_snapshot_view(lakehouse, spark.session())
    assert view.count() == 3
    assert spark.session().sql("SELECT count(*) AS n FROM device_snapshot").first().n == 3

    first_run = first["run_of_snapshot"].value
    result = point_device_snapshot.execute_in_process(
        run_config={"ops": {"point_device_snapshot_op": {"config": {"run_id": first_run}}}},
        resources={"lakehouse": lakehouse},
    )
    assert snapshot_ids(lakehouse) == ["a", "b"]
    pointed = result.asset_materializations_for_node("point_device_snapshot_op")[0]
    assert pointed.metadata["snapshot"].value == snapshot_table(first_run)
    statuses = {e.run_id: e.status for e in manifest_entries(lakehouse)}
    assert statuses == {first_run: "current", second["run_of_snapshot"].value: "kept"}


@pytest.mark.long_on_delta_spark
def test_a_retry_of_the_same_run_reuses_its_snapshot(lakehouse):
    catalog(lakehouse, ["a"])
    run_id = str(uuid.uuid4())
    job = dg.Definitions(
        assets=[device_snapshot],
        jobs=[dg.define_asset_job("snap", selection=[device_snapshot])],
        resources={"lakehouse": lakehouse},
    ).resolve_job_def("snap")
    job.execute_in_process(run_id=run_id)
    catalog(lakehouse, ["a", "b"])
    job.execute_in_process(run_id=run_id)
    # The snapshot is the catalog the run first saw, written once.
    assert lakehouse.version(snapshot_table(run_id)) == 0
    assert snapshot_ids(lakehouse) == ["a"]
    assert len(manifest_entries(lakehouse)) == 1


def test_referenced_snapshots_are_never_compacted_or_vacuumed_and_old_ones_retire(lakehouse):
    catalog(lakehouse, ["a"])
    first = snapshot_table(materialize(lakehouse)["run_of_snapshot"].value)
    for job, config in ((compact_tables, {"tables": [first]}), (vacuum_table, {"table": first})):
        result = job.execute_in_process(
            run_config={"ops": {next(iter(job.graph.node_dict)): {"config": config}}},
            resources={"lakehouse": lakehouse},
            raise_on_error=False,
        )
        assert not result.success
        assert "write-once snapshot the device_snapshot proxy references" in str(result.all_events)
    assert lakehouse.version(first) == 0
    materialize(lakehouse, keep_snapshots=1, grace_hours=0)
    assert lakehouse.exists(first)  # replaced just now: within any grace, kept
    third = materialize(lakehouse, keep_snapshots=1, grace_hours=0)
    assert third["retired_now"].value == first
    assert not lakehouse.exists(first)
    # The second was replaced just now: kept through its grace period.
    assert [e.status for e in manifest_entries(lakehouse)] == ["retired", "kept", "current"]
    with pytest.raises(SnapshotError, match="was retired"):
        point_device_snapshot.execute_in_process(
            run_config={
                "ops": {"point_device_snapshot_op": {"config": {"run_id": first.split("=")[1]}}}
            },
            resources={"lakehouse": lakehouse},
        )


def test_a_reader_sees_the_old_snapshot_then_the_new_never_a_partial_one(lakehouse):
    old, new = [f"d{i}" for i in range(50)], [f"d{i}" for i in range(120)]
    catalog(lakehouse, old)
    materialize(lakehouse)
    catalog(lakehouse, new)
    seen: list[int] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def follow() -> None:
        while not done.is_set() or not seen or seen[-1] != len(new):
            try:
                ids = snapshot_ids(lakehouse)
            except BaseException as error:  # reported to the test thread
                errors.append(error)
                return
            seen.append(len(ids) if ids in (sorted(old), sorted(new)) else -len(ids))

    reader = threading.Thread(target=follow)
    reader.start()
    materialize(lakehouse)
    done.set()
    reader.join(timeout=300)
    assert errors == []
    assert set(seen) <= {len(old), len(new)}, "a reader saw a snapshot that is neither"
    switch = seen.index(len(new))
    assert seen[:switch] and set(seen[:switch]) == {len(old)}
    assert set(seen[switch:]) == {len(new)}
    assert lakehouse.count(SNAPSHOT_MANIFEST) == 2
