"""A sensor's listing follows the landing zone by inotify between full listings: what it
holds after any change equals a full listing of the files, and `changed_since` names
every file whose facts moved, also when the kernel's queue overflowed or folders moved."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import servers

from resources import LandingZone
from sensors.listing import Listing, shared_filesystem


@pytest.fixture
def zone(tmp_path) -> LandingZone:
    (tmp_path / "landing" / "visits").mkdir(parents=True)
    return LandingZone(root=str(tmp_path / "landing"), full_listing_seconds=600)


def write(zone: LandingZone, path: str, text: str = "{}\n") -> None:
    full = Path(zone.root) / path
    full.parent.mkdir(parents=True, exist_ok=True)
    full.write_text(text)


def listed(zone: LandingZone) -> dict:
    return {stat.path: stat for stat in zone.list("visits", suffix=".jsonl")}


@pytest.fixture
def listing(zone):
    found = Listing(zone, "visits", ".jsonl")
    yield found
    found.close()


def test_every_kind_of_change_is_named_and_the_files_equal_a_full_listing(zone, listing):
    write(zone, "visits/date=2024-01-01/a.jsonl")
    write(zone, "visits/date=2024-01-02/b.jsonl")
    listing.refresh()
    assert listing.files == listed(zone)
    mark = listing.mark
    write(zone, "visits/date=2024-01-01/a.jsonl", "{}\n{}\n")  # rewritten in place
    write(zone, "visits/date=2024-01-03/c.jsonl")  # a new folder
    write(zone, "visits/date=2024-01-02/notes.txt")  # not a visits file
    (Path(zone.root) / "visits/date=2024-01-02/b.jsonl").unlink()
    listing.refresh()
    assert listing.changed_since(mark) == {
        "visits/date=2024-01-01/a.jsonl",
        "visits/date=2024-01-02/b.jsonl",
        "visits/date=2024-01-03/c.jsonl",
    }
    assert listing.files == listed(zone)
    assert listing.in_folder("visits/date=2024-01-03") == {"visits/date=2024-01-03/c.jsonl"}
    listing.refresh()
    assert listing.changed_since(listing.mark) == set()


def test_a_burst_that_overflows_the_kernels_queue_is_taken_by_a_full_listing(zone, listing, caplog):
    (Path(zone.root) / "visits/date=2024-01-01").mkdir()  # watched before the burst
    listing.refresh()
    mark = listing.mark
    # Three events a file (create, write, close): more than the 16,384 the kernel queues.
    burst = {f"visits/date=2024-01-01/part-{i:05d}.jsonl" for i in range(6_000)}
    for path in burst:
        write(zone, path)
    listing.refresh()
    assert "inotify queue overflowed for visits" in caplog.text
    assert listing.changed_since(mark) == burst
    assert listing.files == listed(zone)


def test_a_folder_moved_or_removed_takes_its_files_along(zone, listing):
    write(zone, "visits/date=2024-01-01/a.jsonl")
    write(zone, "visits/date=2024-01-02/b.jsonl")
    listing.refresh()
    mark = listing.mark
    visits = Path(zone.root) / "visits"
    (visits / "date=2024-01-01").rename(visits / "date=2024-01-05")
    shutil.rmtree(visits / "date=2024-01-02")
    listing.refresh()
    assert listing.changed_since(mark) == {
        "visits/date=2024-01-01/a.jsonl",
        "visits/date=2024-01-05/a.jsonl",
        "visits/date=2024-01-02/b.jsonl",
    }
    assert listing.files == listed(zone)
    write(zone, "visits/date=2024-01-05/later.jsonl")  # the moved folder is still followed
    listing.refresh()
    assert "visits/date=2024-01-05/later.jsonl" in listing.files


@pytest.fixture
def notified(s3_endpoint, s3_storage, bucket):
    """A landing zone in the bucket, with the queue its event notifications go to."""
    from resources.s3_landing import S3LandingZone

    queue = servers.notify_queue(s3_endpoint, bucket)
    return S3LandingZone(root=f"s3://{bucket}/in", s3=s3_storage, queue_url=queue)


def test_an_object_store_listing_follows_its_queue_and_sweeps_for_what_it_missed(
    notified, bucket, s3_endpoint
):
    client = servers.s3_client(s3_endpoint)

    def put(path: str, body: bytes = b"{}\n") -> None:
        client.put_object(Bucket=bucket, Key=f"in/{path}", Body=body)

    put("visits/date=2024-01-01/a.jsonl")
    put("visits/date=2024-01-02/b.jsonl")
    # Two sensors' listings of one zone: each sees every message, taken once.
    first, second = Listing(notified, "visits", ".jsonl"), Listing(notified, "visits", ".jsonl")
    first.refresh()
    second.refresh()
    assert first.files == second.files == listed(notified)
    mark = first.mark
    put("visits/date=2024-01-01/a.jsonl", b"{}\n{}\n")  # replaced
    put("visits/date=2024-01-03/c.jsonl")
    put("visits/date=2024-01-03/notes.txt")  # not a visits file
    put("visits/_temporary/0/d.jsonl")  # a writer's work in progress
    put("payments/e.jsonl")  # another folder
    client.delete_object(Bucket=bucket, Key="in/visits/date=2024-01-02/b.jsonl")
    first.refresh()
    second.refresh()
    assert first.changed_since(mark) == {
        "visits/date=2024-01-01/a.jsonl",
        "visits/date=2024-01-02/b.jsonl",
        "visits/date=2024-01-03/c.jsonl",
    }
    assert first.files == second.files == listed(notified)
    # A tick looks only at what the queue names: an object whose notification never came
    # is taken by the next sweep.
    client.put_bucket_notification_configuration(Bucket=bucket, NotificationConfiguration={})
    put("visits/date=2024-01-04/f.jsonl")
    first.refresh()
    assert "visits/date=2024-01-04/f.jsonl" not in first.files
    first.full_listing_seconds = 0
    first.refresh()
    assert first.files == listed(notified)


def test_an_object_store_listing_whose_queue_cannot_be_read_lists_whole(
    notified, bucket, s3_endpoint, caplog
):
    broken = notified.model_copy(update={"queue_url": notified.queue_url + "-gone"})
    listing = Listing(broken, "visits", ".jsonl")
    listing.refresh()
    servers.s3_client(s3_endpoint).put_object(
        Bucket=bucket, Key="in/visits/date=2024-01-01/a.jsonl", Body=b"{}\n"
    )
    listing.refresh()
    assert listing.files == listed(notified) and len(listing.files) == 1
    assert "listing visits whole: queue" in caplog.text


def test_a_mark_of_another_listing_asks_for_a_full_comparison(zone, listing):
    listing.refresh()
    other = Listing(zone, "visits", ".jsonl")
    try:
        other.refresh()
        assert listing.changed_since(other.mark) is None
    finally:
        other.close()


MOUNTS = """\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
40 27 0:50 / /data rw,relatime - nfs4 server:/export rw,vers=4.2
41 40 254:1 / /data/local\\040disk rw,relatime - xfs /dev/vdb rw
42 27 0:51 / /mnt/host rw,relatime - fuse.grpcfuse grpcfuse rw
43 27 0:52 / /mnt/c rw,noatime - 9p drvfs rw
"""


@pytest.mark.parametrize(
    ("path", "shared"),
    [
        ("/work/landing", None),
        ("/data/landing", "nfs4"),
        ("/data/local disk/landing", None),  # a local disk mounted inside the share
        ("/data-other/landing", None),  # a name that merely starts like a mount point
        ("/mnt/host/landing", "fuse.grpcfuse"),  # a Docker Desktop bind mount
        ("/mnt/c/Users/me/landing", "9p"),  # a Windows drive under WSL
    ],
)
def test_a_landing_zone_written_from_elsewhere_is_listed_at_every_tick(path, shared):
    """inotify sees only this machine's writes: on a share, each tick lists everything."""
    assert shared_filesystem(path, MOUNTS) == shared
