"""Sources landing in a bucket of a real S3 server: the sensors list it (or follow its
notification queue), Spark reads it through S3A, and every semantic of the local landing
zone holds (late, duplicated, replaced, bad input named by file and line). Telemetry's
deliveries on a bucket, on both compute paths: tests/assets/telemetry/test_compute_paths.py."""

from __future__ import annotations

import datetime as dt
import json

import dagster as dg
import pytest
import servers
from support import day_of_visits, land, partition_range, visit

from assets.overwriting import visits_daily
from assets.overwriting.data_overwrite import VISITS_DAILY
from assets.warehouse import EventSettings, event_batches, user_events, user_events_staging
from assets.warehouse.events_source import batch_file
from assets.warehouse.staging_merge import USER_EVENTS
from resources import Lakehouse, LandingZone
from resources.object_uri import object_path
from sensors import visits_late_files
from sensors.event_batches import event_batch_files

pytestmark = pytest.mark.parametrize("engine", ["delta-rs"])

DAYS = [dt.date(2024, 4, 1), dt.date(2024, 4, 2)]


def jsonl(visits: list[dict]) -> bytes:
    return "".join(json.dumps(v) + "\n" for v in visits).encode()


@pytest.fixture
def resources(spark, lakehouse: Lakehouse, s3_landing: LandingZone) -> dict:
    return {"spark": spark, "lakehouse": lakehouse, "landing": s3_landing}


def tick(instance, resources, cursor=None, sensor=visits_late_files) -> dg.SensorResult:
    sensor_resources = {"landing": resources["landing"], "lakehouse": resources["lakehouse"]}
    with dg.build_sensor_context(
        instance=instance, cursor=cursor, resources=sensor_resources
    ) as context:
        return sensor(context)


def visit_ids(lakehouse: Lakehouse, day: dt.date) -> list[str]:
    rows = lakehouse.read_arrow(VISITS_DAILY).to_pylist()
    return sorted(r["visit_id"] for r in rows if r["event_time"].date() == day)


def test_visits_from_a_bucket_late_duplicated_and_replaced(instance, resources, s3_endpoint):
    # The sensor follows the bucket's notification queue (the other tests: its listing).
    bucket = object_path(resources["landing"].root).partition("/")[0]
    queue = servers.notify_queue(s3_endpoint, bucket)
    landing = resources["landing"].model_copy(update={"queue_url": queue})
    resources = {**resources, "landing": landing}
    lakehouse = resources["lakehouse"]
    for day in DAYS:
        land(landing, f"visits/date={day}/part.jsonl", jsonl(day_of_visits(day, 3)))
    dg.materialize(
        [visits_daily], tags=partition_range(*DAYS), resources=resources, instance=instance
    )
    assert visit_ids(lakehouse, DAYS[0]) == [f"v20240401-{i}" for i in range(3)]
    cursor = tick(instance, resources).cursor

    late = jsonl([visit("late", dt.datetime(2024, 4, 1, 7, tzinfo=dt.UTC))])
    land(landing, f"visits/date={DAYS[0]}/late.jsonl", late)
    result = tick(instance, resources, cursor)
    assert [r.partition_key for r in result.run_requests] == [str(DAYS[0])]
    dg.materialize(
        [visits_daily], partition_key=str(DAYS[0]), resources=resources, instance=instance
    )
    assert "late" in visit_ids(lakehouse, DAYS[0])

    # Delivered again, byte for byte (a new object, the same content): nothing to do.
    land(landing, f"visits/date={DAYS[0]}/late.jsonl", late)
    again = tick(instance, resources, result.cursor)
    assert again.run_requests == []

    # Replaced by its writer with other rows: its day, and only its day, again.
    land(landing, f"visits/date={DAYS[1]}/part.jsonl", jsonl(day_of_visits(DAYS[1], 2, prefix="w")))
    replaced = tick(instance, resources, again.cursor)
    assert [r.partition_key for r in replaced.run_requests] == [str(DAYS[1])]
    dg.materialize(
        [visits_daily], partition_key=str(DAYS[1]), resources=resources, instance=instance
    )
    assert visit_ids(lakehouse, DAYS[1]) == ["w20240402-0", "w20240402-1"]


def test_a_bad_line_in_a_bucket_is_named_and_loses_nothing(instance, resources):
    landing, lakehouse = resources["landing"], resources["lakehouse"]
    land(landing, f"visits/date={DAYS[0]}/part.jsonl", jsonl(day_of_visits(DAYS[0], 2)))
    dg.materialize(
        [visits_daily], partition_key=str(DAYS[0]), resources=resources, instance=instance
    )
    before = lakehouse.version(VISITS_DAILY)
    good = jsonl([visit("ok", dt.datetime(2024, 4, 1, 9, tzinfo=dt.UTC))])
    land(landing, f"visits/date={DAYS[0]}/broken.jsonl", good + b"{not json\n")
    with pytest.raises(Exception, match=r"visits/date=2024-04-01/broken\.jsonl:2: malformed JSON"):
        dg.materialize(
            [visits_daily], partition_key=str(DAYS[0]), resources=resources, instance=instance
        )
    assert lakehouse.version(VISITS_DAILY) == before
    assert visit_ids(lakehouse, DAYS[0]) == ["v20240401-0", "v20240401-1"]


def event(event_id: str, hour: int = 10) -> dict:
    return {
        "event_id": event_id,
        "event_timestamp": f"2024-05-01T{hour}:00:00+00:00",
        "ingestion_time": "2024-05-02T00:00:00+00:00",
        "user_id": "u1",
        "payload": {"page": "/"},
    }


def test_event_batches_from_a_bucket_are_published_once_per_content(instance, resources):
    landing, lakehouse = resources["landing"], resources["lakehouse"]
    run_resources = {**resources, "event_settings": EventSettings()}
    land(landing, batch_file("b1"), jsonl([event("e1"), event("e2"), event("e1", hour=11)]))
    first = tick(instance, resources, sensor=event_batch_files)
    assert [r.partition_key for r in first.run_requests] == ["b1"]
    instance.add_dynamic_partitions(event_batches.name, ["b1"])
    run = dg.materialize(
        [user_events_staging, user_events],
        partition_key="b1",
        resources=run_resources,
        instance=instance,
    )
    assert run.success
    published = lakehouse.read_arrow(USER_EVENTS).to_pylist()
    assert sorted(r["event_id"] for r in published) == ["e1", "e2"]

    # Delivered twice (the same bytes again): no run; changed: that batch, once more.
    land(landing, batch_file("b1"), jsonl([event("e1"), event("e2"), event("e1", hour=11)]))
    again = tick(instance, resources, first.cursor, sensor=event_batch_files)
    assert again.run_requests == []
    land(landing, batch_file("b1"), jsonl([event("e1"), event("e2"), event("e3")]))
    changed = tick(instance, resources, again.cursor, sensor=event_batch_files)
    assert [r.partition_key for r in changed.run_requests] == ["b1"]
    assert changed.run_requests[0].run_key != first.run_requests[0].run_key
