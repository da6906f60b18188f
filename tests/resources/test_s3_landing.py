"""A landing zone in a bucket of a real S3 server (moto's, on loopback)."""

from __future__ import annotations

import hashlib
import json
import math

import pytest
import servers

from resources.landing import LandingFileError
from resources.s3_landing import S3LandingZone


@pytest.fixture
def client(s3_endpoint: str):
    return servers.s3_client(s3_endpoint)


@pytest.fixture
def zone(bucket, s3_storage) -> S3LandingZone:
    # Two keys a page: every listing below takes several requests.
    return S3LandingZone(root=f"s3://{bucket}/in", s3=s3_storage, page_size=2)


def put(client, bucket: str, path: str, body: bytes) -> None:
    client.put_object(Bucket=bucket, Key=f"in/{path}", Body=body)


def test_a_paged_listing_names_every_file_but_writers_work_in_progress(zone, client, bucket):
    for name in ("a.jsonl", "b.jsonl", "c.jsonl", ".d.jsonl.tmp", "_e.jsonl", "f.csv"):
        put(client, bucket, f"visits/date=2024-01-01/{name}", b"{}\n")
    put(client, bucket, "visits/_temporary/0/g.jsonl", b"{}\n")
    put(client, bucket, "visits/date=2024-01-02/sub/h.jsonl", b"{}\n")
    put(client, bucket, "visits-other/i.jsonl", b"{}\n")  # beside the folder, not in it
    put(client, bucket, "visits/date=2024-01-01/", b"")  # a console's folder marker
    listed = zone.list("visits", suffix=".jsonl")
    assert [s.path for s in listed] == [
        "visits/date=2024-01-01/a.jsonl",
        "visits/date=2024-01-01/b.jsonl",
        "visits/date=2024-01-01/c.jsonl",
        "visits/date=2024-01-02/sub/h.jsonl",
    ]
    assert all(s.size == 3 and s.etag and s.mtime_ns > 0 for s in listed)
    assert [s.path for s in zone.list("visits/date=2024-01-02", recursive=False)] == []
    assert zone.stat("visits/date=2024-01-01/a.jsonl") == listed[0]
    assert zone.stat("visits/date=2024-01-01/a.json") is None
    assert zone.exists("visits/date=2024-01-01/b.jsonl")
    assert zone.list("nothing-here") == []


def test_a_replaced_object_of_the_same_size_and_second_is_seen_by_its_entity_tag(
    zone, client, bucket
):
    put(client, bucket, "t/a.csv", b"one\n")
    [before] = zone.list("t")
    first = zone.fingerprint(before)
    put(client, bucket, "t/a.csv", b"two\n")
    [after] = zone.list("t")
    assert after.size == before.size and after.etag != before.etag
    # The known fingerprint is reused only while size, time and tag all hold.
    assert zone.fingerprint(before, {before.path: first}) is first
    again = zone.fingerprint(after, {after.path: first})
    assert again.sha256 == hashlib.sha256(b"two\n").hexdigest()


def test_reads_take_the_bytes_and_the_listings_facts(zone, client, bucket):
    content = b"ts,in_spec\n2024-05-01T00:00:00Z,1\n2024-05"
    put(client, bucket, "telemetry/Tool01/a.csv", content)
    landed = zone.read("telemetry/Tool01/a.csv", prefixes=lambda c: [11, c.rfind(b"\n") + 1])
    [listed] = zone.list("telemetry")
    assert landed.content == content
    assert landed.fingerprint == (
        listed.path,
        listed.size,
        listed.mtime_ns,
        hashlib.sha256(content).hexdigest(),
        listed.etag,
    )
    assert landed.prefix_sha256 == {n: hashlib.sha256(content[:n]).hexdigest() for n in (11, 34)}
    assert zone.head("telemetry/Tool01/a.csv", 10) == content[:10]  # a ranged request
    put(client, bucket, "telemetry/Tool01/empty.csv", b"")
    assert zone.head("telemetry/Tool01/empty.csv") == b""
    with pytest.raises(FileNotFoundError):
        zone.read("telemetry/Tool01/gone.csv")


@pytest.fixture
def requests(zone):
    """The S3 operations the landing zone's client makes, by name, in order."""
    made: list[str] = []
    events = zone._client().meta.events

    def count(model, **_) -> None:
        made.append(model.name)

    events.register("before-call.s3", count)
    yield made
    events.unregister("before-call.s3", count)


def paged(zone: S3LandingZone, page_size: int) -> S3LandingZone:
    return S3LandingZone(root=zone.root, s3=zone.s3, page_size=page_size)


def test_a_range_of_day_folders_is_listed_in_one_pass(zone, client, bucket, requests):
    days = [f"date=2024-01-{d:02d}" for d in range(1, 9)]
    for day in days:
        for name in ("a.jsonl", "b.jsonl", "_c.jsonl", "d.csv", "sub/e.jsonl"):
            put(client, bucket, f"visits/{day}/{name}", b"{}\n")
    put(client, bucket, "visits/date=2024-01-03/", b"")  # a console's folder marker
    put(client, bucket, "visits/date=2024-01-09/a.jsonl", b"{}\n")  # after the last day
    # Every day but one between (not asked for).
    asked = [f"visits/{d}" for d in days if d != "date=2024-01-04"]
    one_by_one = {d: zone.list(d, suffix=".jsonl", recursive=False) for d in asked}
    assert all(len(files) == 2 for files in one_by_one.values())
    # 41 keys from the first day to the last (the marker and the day not asked for too).
    for page_size in (1000, 7):
        requests.clear()
        assert paged(zone, page_size).list_folders(asked, suffix=".jsonl") == one_by_one
        assert requests == ["ListObjectsV2"] * math.ceil(41 / page_size)
    # Two keys a page: the first page holds no folder whole, so the listing stops and each
    # folder is listed on its own (three pages each).
    requests.clear()
    assert zone.list_folders(asked, suffix=".jsonl") == one_by_one
    assert len(requests) == 1 + len(asked) * 3
    # Two folders far apart: once a page holds neither whole, the listing stops and the
    # last folder is listed on its own.
    far = ["visits/date=2024-01-01", "visits/date=2024-01-08"]
    requests.clear()
    listed = paged(zone, 7).list_folders([*far, "visits-other"], suffix=".jsonl")
    assert listed == {d: one_by_one[d] for d in far} | {"visits-other": []}
    assert len(requests) == 2 + 1 + 1  # and the other parent's folder, on its own


def test_files_side_by_side_are_looked_up_in_one_listing(zone, client, bucket, requests):
    paths = [f"events/b{i:03d}.jsonl" for i in range(0, 40, 2)]
    for i in range(60):
        put(client, bucket, f"events/b{i:03d}.jsonl", f"{i}\n".encode())
    asked = [*reversed(paths), "events/b001.jsonl", "events/gone.jsonl"]
    one_by_one = [zone.stat(path) for path in asked]
    assert one_by_one[-1] is None
    wide = paged(zone, 1000)
    requests.clear()
    assert wide.listed_each(asked, adjacent=True) == one_by_one
    assert requests == ["ListObjectsV2"]
    # Not said to be adjacent (a queue's names, scattered): a lookup each.
    requests.clear()
    assert wide.listed_each(asked) == one_by_one
    assert requests == ["HeadObject"] * len(asked)
    # Ten keys a page, of which six asked for (b000 to b009): fewer than LOOKUPS_PER_PAGE,
    # so after the first page each object is looked up on its own.
    requests.clear()
    assert paged(zone, 10).listed_each(asked, adjacent=True) == one_by_one
    assert requests.count("ListObjectsV2") == 1
    assert requests.count("HeadObject") == len(asked) - 6


def test_paths_cannot_leave_the_landing_zone(zone):
    with pytest.raises(ValueError, match="leaves the landing zone"):
        zone.read("../outside.jsonl")
    with pytest.raises(ValueError, match="leaves the landing zone"):
        zone.stat("visits/../../outside.jsonl")


def test_spark_and_executors_reach_the_same_objects(zone, client, bucket):
    put(client, bucket, "visits/date=2024-01-01/a.jsonl", b'{"a": 1}\n')
    assert zone.spark_path("visits/date=2024-01-01/a.jsonl") == (
        f"s3a://{bucket}/in/visits/date=2024-01-01/a.jsonl"
    )
    assert zone.spark_root == f"s3a://{bucket}/in/"
    filesystem, root = zone.arrow_filesystem()
    with filesystem.open_input_file(f"{root}/visits/date=2024-01-01/a.jsonl") as file:
        assert file.read_at(4, 0) == b'{"a"'
    with pytest.raises(TypeError, match="no local path"):
        zone.absolute("visits")


def test_an_unreadable_object_is_named(zone, s3_storage):
    elsewhere = S3LandingZone(root="s3://no-such-bucket-here/in", s3=s3_storage)
    with pytest.raises(LandingFileError, match="a.csv: cannot be read"):
        elsewhere.read("a.csv")


def test_objects_are_hashed_side_by_side_and_one_replaced_since_its_listing_waits(
    zone, client, bucket, caplog
):
    for i in range(5):
        put(client, bucket, f"events/b{i}.jsonl", f"{i}\n".encode())
    listed = zone.list("events")
    put(client, bucket, "events/b3.jsonl", b"changed\n")  # after the listing
    prints = zone.fingerprints(listed)
    assert sorted(prints) == [f"events/b{i}.jsonl" for i in (0, 1, 2, 4)]
    assert all(prints[s.path].etag == s.etag for s in listed if s.path in prints)
    assert "events/b3.jsonl skipped: cannot be read (events/b3.jsonl: replaced since" in caplog.text
    now = zone.stat("events/b3.jsonl")
    assert now is not None
    assert zone.fingerprints([now])[now.path].sha256 == hashlib.sha256(b"changed\n").hexdigest()


@pytest.fixture
def notified(s3_endpoint, bucket, s3_storage) -> S3LandingZone:
    """The landing zone with the queue its bucket's event notifications go to."""
    queue = servers.notify_queue(s3_endpoint, bucket)
    return S3LandingZone(root=f"s3://{bucket}/in", s3=s3_storage, queue_url=queue)


def test_the_queue_names_each_object_created_or_removed_under_the_root(
    notified, client, bucket, caplog
):
    put(client, bucket, "visits/date=2024-01-01/a visit.jsonl", b"{}\n")  # a space: encoded
    put(client, bucket, "visits/date=2024-01-01/b.jsonl", b"{}\n")
    client.delete_object(Bucket=bucket, Key="in/visits/date=2024-01-01/b.jsonl")
    client.put_object(Bucket=bucket, Key="elsewhere/c.jsonl", Body=b"{}\n")  # not the root's
    sqs = notified._client("sqs")
    sqs.send_message(QueueUrl=notified.queue_url, MessageBody="hello")
    through_sns = {"Records": [{"s3": {"bucket": {"name": bucket}, "object": {"key": "in/d"}}}]}
    sqs.send_message(
        QueueUrl=notified.queue_url,
        MessageBody=json.dumps({"Type": "Notification", "Message": json.dumps(through_sns)}),
    )
    assert sorted(notified.notified()) == [
        "d",
        "visits/date=2024-01-01/a visit.jsonl",
        "visits/date=2024-01-01/b.jsonl",
        "visits/date=2024-01-01/b.jsonl",
    ]
    assert "skipped: not an S3 event notification" in caplog.text
    assert notified.notified() == []  # taken off the queue


def test_a_queue_that_cannot_be_read_is_named(zone):
    broken = zone.model_copy(update={"queue_url": f"{zone._client('sqs').meta.endpoint_url}/1/no"})
    with pytest.raises(OSError, match="queue .*/no cannot be read"):
        broken.notified()
