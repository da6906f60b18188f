"""The change-file sensor against a real Dagster instance and landing zone: new devices
and catalog days are picked up (the defect: they never were), the catalog's days as one
run merged in order, changed files again, and re-notified files never."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import dagster as dg
import pytest
import yaml
from support import partition_range, sensor_resources

from assets.updates import IN_ORDER, device_catalog, device_catalog_job, devices, devices_job
from resources import Lakehouse
from sensors import change_files, file_state, requested_again

DAY1, DAY2, DAY3 = (dt.date(2024, 5, d) for d in (1, 2, 3))
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def tick(instance, landing, cursor=None) -> dg.SensorResult:
    with dg.build_sensor_context(
        instance=instance, cursor=cursor, resources=sensor_resources(landing)
    ) as context:
        return change_files(context)


def requested(result: dg.SensorResult) -> list[tuple[str, str, str]]:
    """(asset, partition or `first..last`, trigger) of each request, in order."""

    def span(request: dg.RunRequest) -> str:
        days = request.partition_key_range
        return f"{days.start}..{days.end}" if days else request.partition_key

    return [
        (r.job_name.removesuffix("_job"), span(r), r.tags["updates/trigger"])
        for r in result.run_requests
    ]


@pytest.fixture
def land(landing):
    def write_file(folder: str, day: dt.date, body: str) -> Path:
        suffix = ".csv" if folder == "devices_cdc" else ".jsonl"
        path = Path(landing.root) / folder / f"{day.isoformat()}{suffix}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
        return path

    return write_file


def cdc(*rows: str) -> str:
    return "type;full_name;version\n" + "".join(f"{r}\n" for r in rows)


def catalog_rows(*ids: int, name: str = "Phone") -> str:
    keys = ("id", "brand_name", "full_name", "processor_brand")
    return "".join(
        json.dumps(dict(zip(keys, (str(i), "B", name, "P"), strict=True))) + "\n" for i in ids
    )


def materialize(asset, day, resources, instance) -> None:
    dg.materialize([asset], partition_key=day.isoformat(), resources=resources, instance=instance)


def test_the_sensor_needs_no_spark():
    # Every tick here runs on a delta-spark lakehouse whose Spark refuses to start.
    assert change_files.required_resource_keys == {"landing", "lakehouse"}


@pytest.mark.long_on_delta_spark
def test_new_devices_days_are_requested_and_settle(resources, instance, landing, land):
    land("devices_cdc", DAY1, cdc("phone;Pixel;1"))
    land("devices_cdc", DAY2, cdc("phone;Pixel 2;2"))
    first = tick(instance, landing)
    # Consecutive days: one run, which merges them in date order.
    assert requested(first) == [("devices", "2024-05-01..2024-05-02", "new-partition")]
    # Seen again before the runs: the same run keys, so Dagster launches each once.
    again = tick(instance, landing, first.cursor)
    assert [r.run_key for r in again.run_requests] == [r.run_key for r in first.run_requests]
    dg.materialize(
        [devices], resources=resources, instance=instance, tags=partition_range(DAY1, DAY2)
    )
    assert tick(instance, landing, first.cursor).run_requests == []
    # Re-notified (touched) without a change: nothing; rewritten: that day again.
    path = Path(landing.root) / "devices_cdc" / "2024-05-01.csv"
    os.utime(path, ns=(path.stat().st_mtime_ns + 10**10,) * 2)
    assert tick(instance, landing, first.cursor).run_requests == []
    land("devices_cdc", DAY1, cdc("phone;Pixel;1", "tablet;Tab;1"))
    assert requested(tick(instance, landing, first.cursor)) == [
        ("devices", "2024-05-01", "changed-file")
    ]


@pytest.mark.long_on_delta_spark
def test_a_tick_reads_only_the_materializations_since_its_cursor_and_misses_none(
    resources, instance, landing, land
):
    land("devices_cdc", DAY1, cdc("phone;Pixel;1"))
    land("devices_cdc", DAY2, cdc("phone;Pixel 2;2"))
    materialize(devices, DAY1, resources, instance)
    # A cursor of the sensor before it kept what materializations recorded (no storage id
    # beside the version): every day is looked up once, the materialized one settles.
    files = {
        f"devices_cdc/{day}.csv": landing.fingerprint(landing.stat(f"devices_cdc/{day}.csv"))
        for day in (DAY1, DAY2)
    }
    lakehouse = sensor_resources(landing)["lakehouse"]
    older = file_state.store(lakehouse, change_files.name, file_state.EMPTY, files)
    upgraded = tick(instance, landing, file_state.cursor_of(older))
    assert requested(upgraded) == [("devices", "2024-05-02", "new-partition")]
    # Materialized since (by a run the sensor never asked for): read from the instance
    # after the cursor's storage id, not looked up per file.
    materialize(devices, DAY2, resources, instance)
    settled = tick(instance, landing, upgraded.cursor)
    assert settled.run_requests == []
    # The day's recorded digest is remembered: rewritten, it runs again; changed back, no
    # run is needed (its latest materialization read exactly that content).
    land("devices_cdc", DAY2, cdc("phone;Pixel 2;3"))
    assert requested(tick(instance, landing, settled.cursor)) == [
        ("devices", "2024-05-02", "changed-file")
    ]
    land("devices_cdc", DAY2, cdc("phone;Pixel 2;2"))
    assert tick(instance, landing, settled.cursor).run_requests == []


@pytest.mark.long_on_delta_spark
def test_devices_days_are_merged_in_date_order_whatever_order_they_land(
    resources, lakehouse, instance, landing, land
):
    """A Merger applies days in the order it merges them. Days landing together (newest
    first here) are one run that merges them oldest first; a changed day and new days
    after it are two runs, requested oldest first, and `devices_job` runs one at a time
    in that order (its `updates/in_order` tag, limited in platform/dagster.yaml)."""
    land("devices_cdc", DAY3, "type;full_name;version;is_deleted\nphone;Pixel;1;true\n")
    land("devices_cdc", DAY2, cdc("phone;Pixel (renamed);1", "tablet;Tab;1"))
    land("devices_cdc", DAY1, cdc("phone;Pixel;1"))
    first = tick(instance, landing)
    assert requested(first) == [("devices", "2024-05-01..2024-05-03", "new-partition")]
    dg.materialize(
        [devices], resources=resources, instance=instance, tags=partition_range(DAY1, DAY3)
    )
    rows = lakehouse.read_arrow("devices").to_pylist()
    assert [(r["type"], r["full_name"], r["version"]) for r in rows] == [("tablet", "Tab", "1")]

    land("devices_cdc", DAY1, cdc("phone;Pixel;1", "watch;W;1"))
    land("devices_cdc", dt.date(2024, 5, 5), cdc("watch;W;2"))
    land("devices_cdc", dt.date(2024, 5, 4), cdc("watch;W;3"))
    assert requested(tick(instance, landing, first.cursor)) == [
        ("devices", "2024-05-01", "changed-file"),
        ("devices", "2024-05-04..2024-05-05", "new-partition"),
    ]


@pytest.mark.long_on_delta_spark
def test_a_day_changed_back_and_forth_gets_a_run_each_time(resources, instance, landing, land):
    """A file A, then B, then A again: the third run must not reuse the first one's run
    key, or Dagster skips it and `devices` keeps B while the file says A."""
    cursor, keys = None, []
    for body in (cdc("phone;Pixel;1"), cdc("phone;Pixel 2;1"), cdc("phone;Pixel;1")):
        land("devices_cdc", DAY1, body)
        result = tick(instance, landing, cursor)
        cursor = result.cursor
        [request] = result.run_requests
        keys.append(request.run_key)
        materialize(devices, DAY1, resources, instance)
    assert len(set(keys)) == 3
    assert tick(instance, landing, cursor).run_requests == []


def test_devices_runs_go_one_at_a_time():
    limits = yaml.safe_load((PROJECT_ROOT / "platform" / "dagster.yaml").read_text())
    [limit] = [
        limit
        for limit in limits["concurrency"]["runs"]["tag_concurrency_limits"]
        if limit["key"] == IN_ORDER
    ]
    assert limit == {"key": IN_ORDER, "value": {"applyLimitPerUniqueValue": True}, "limit": 1}
    assert devices_job.tags == {IN_ORDER: "devices"}
    assert device_catalog_job.tags == {IN_ORDER: "device_catalog"}


def catalog_range(result: dg.SensorResult) -> tuple[str, str, str]:
    """The one catalog run a tick asks for: (first day, last day, trigger)."""
    [request] = result.run_requests
    span = request.partition_key_range
    first, last = (span.start, span.end) if span else (request.partition_key,) * 2
    return first, last, request.tags["updates/trigger"]


def materialize_range(first: str, last: str, resources, instance) -> None:
    dg.materialize(
        [device_catalog],
        resources=resources,
        instance=instance,
        tags=partition_range(first, last) if first != last else None,
        partition_key=first if first == last else None,
    )


@pytest.mark.long_on_delta_spark
def test_catalog_days_are_requested_as_one_run_in_order(resources, instance, landing, land):
    for day in (DAY1, DAY2, DAY3):
        land("device_catalog", day, catalog_rows(1, 2, name=f"Phone {day.day}"))
    first = tick(instance, landing)
    assert catalog_range(first) == ("2024-05-01", "2024-05-03", "new-partition")
    # Seen again before the run: the same run key, so Dagster launches it once.
    assert [r.run_key for r in tick(instance, landing).run_requests] == [
        r.run_key for r in first.run_requests
    ]
    materialize_range("2024-05-01", "2024-05-03", resources, instance)
    assert tick(instance, landing).run_requests == []

    # A corrected file for the middle day: that day and the day after it, in one run.
    land("device_catalog", DAY2, catalog_rows(1, 2, 3))
    assert catalog_range(tick(instance, landing)) == ("2024-05-02", "2024-05-03", "changed-file")
    materialize_range("2024-05-02", "2024-05-03", resources, instance)
    assert tick(instance, landing).run_requests == []

    # The last day alone is a run of that day.
    land("device_catalog", DAY3, catalog_rows(4))
    assert catalog_range(tick(instance, landing)) == ("2024-05-03", "2024-05-03", "changed-file")


def test_a_gap_in_catalog_days_stops_the_chain(instance, landing, land):
    land("device_catalog", DAY1, catalog_rows(1))
    land("device_catalog", DAY3, catalog_rows(2))
    assert catalog_range(tick(instance, landing)) == ("2024-05-01", "2024-05-01", "new-partition")


def test_a_range_whose_run_failed_on_something_else_than_its_data_is_asked_for_again(
    resources, instance, landing, land, tmp_path, monkeypatch
):
    """The run key names the files and what they replace, so the range's own key would
    never launch again: the range is asked for again, as that range, in order."""
    monkeypatch.setattr(requested_again, "FIRST_BACKOFF", 0.0)  # no minute's wait here
    land("devices_cdc", DAY1, cdc("phone;Pixel;1"))
    land("devices_cdc", DAY2, cdc("phone;Pixel 2;2"))
    first = tick(instance, landing)
    (tmp_path / "blocked").write_text("a file where the lakehouse's folder should be")
    broken = Lakehouse(root=str(tmp_path / "blocked" / "lake"), engine="delta-rs")

    def run(lakehouse: Lakehouse, tags: dict[str, str]) -> dg.ExecuteInProcessResult:
        return (
            dg.Definitions(
                assets=[devices],
                jobs=[devices_job],
                resources={**resources, "lakehouse": lakehouse},
            )
            .resolve_job_def(devices_job.name)
            .execute_in_process(
                instance=instance,
                tags={"dagster/sensor_name": change_files.name, **tags},
                raise_on_error=False,
            )
        )

    (request,) = first.run_requests
    failed = run(broken, request.tags)
    assert not failed.success
    second = tick(instance, landing, first.cursor)
    (again,) = [r for r in second.run_requests if r.run_key == f"again:{failed.run_id}"]
    assert (again.job_name, again.partition_key_range) == (
        devices_job.name,
        dg.PartitionKeyRange(DAY1.isoformat(), DAY2.isoformat()),
    )
    assert again.tags == {
        **request.tags,  # its range and trigger
        IN_ORDER: "devices",  # the job's: one run at a time, in order
        requested_again.ATTEMPT_TAG: "1",
        requested_again.AGAIN_OF_TAG: failed.run_id,
    }
    assert run(resources["lakehouse"], again.tags).success
    assert tick(instance, landing, second.cursor).run_requests == []
