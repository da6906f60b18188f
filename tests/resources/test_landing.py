import hashlib
import logging
import os
from pathlib import Path

import pytest

from resources.landing import LandingFileError, sources_digest


def test_listing_skips_writers_temporary_files(landing, write_visits):
    write_visits("2024-01-01", "a.jsonl", "{}\n")
    write_visits("2024-01-01", ".a.jsonl.tmp", "{}\n")
    write_visits("2024-01-01", "_b.jsonl", "{}\n")
    assert [s.path for s in landing.list("visits", suffix=".jsonl")] == [
        "visits/date=2024-01-01/a.jsonl"
    ]


def test_fingerprint_rehashes_only_when_size_or_mtime_moved(landing, write_visits):
    path = write_visits("2024-01-01", "a.jsonl", "one\n")
    [stat] = landing.list("visits")
    first = landing.fingerprint(stat)
    # Touched but unchanged: a fresh hash equals the old one.
    os.utime(path, ns=(stat.mtime_ns + 10**9, stat.mtime_ns + 10**9))
    [touched] = landing.list("visits")
    assert landing.fingerprint(touched).sha256 == first.sha256
    # Known size and mtime: the known fingerprint is reused without reading.
    assert landing.fingerprint(stat, {stat.path: first}) is first


def test_digest_ignores_order_and_mtimes_but_not_content(landing, write_visits):
    write_visits("2024-01-01", "a.jsonl", "one\n")
    write_visits("2024-01-01", "b.jsonl", "two\n")
    prints = [landing.fingerprint(s) for s in landing.list("visits")]
    assert sources_digest(prints) == sources_digest(reversed(prints))
    write_visits("2024-01-01", "b.jsonl", "TWO\n")
    changed = [landing.fingerprint(s) for s in landing.list("visits")]
    assert sources_digest(changed) != sources_digest(prints)


def test_paths_cannot_leave_the_landing_zone(landing):
    with pytest.raises(ValueError, match="leaves the landing zone"):
        landing.read("../outside.jsonl")


def test_read_hashes_the_prefixes_asked_for_with_the_file(landing):
    content = b"ts,in_spec\n2024-05-01T00:00:00Z,1\n2024-05"
    path = Path(landing.root) / "telemetry" / "Tool01" / "a.csv"
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    landed = landing.read(
        "telemetry/Tool01/a.csv", prefixes=lambda c: [11, c.rfind(b"\n") + 1, 10**6]
    )
    assert landed.fingerprint.sha256 == hashlib.sha256(content).hexdigest()
    assert landed.prefix_sha256 == {
        n: hashlib.sha256(content[:n]).hexdigest() for n in (11, 34, len(content))
    }


@pytest.fixture
def day_folder(landing) -> Path:
    folder = Path(landing.root) / "visits" / "date=2024-01-01"
    folder.mkdir(parents=True)
    (folder / "good.jsonl").write_text('{"a": 1}\n')
    return folder


def test_listing_takes_regular_files_only_and_names_what_it_skips(landing, day_folder, caplog):
    """A named pipe would block the run that reads it for ever; a link to nothing, a
    folder named like a file, cannot be read either. Each is skipped, named."""
    os.mkfifo(day_folder / "b.jsonl")
    (day_folder / "gone.jsonl").symlink_to(day_folder / "nothing-here.jsonl")
    (day_folder / "folder.jsonl").mkdir()
    (day_folder / "folder.jsonl" / "inside.jsonl").write_text("{}\n")
    with caplog.at_level(logging.WARNING, logger="resources.landing"):
        listed = [s.path for s in landing.list("visits", suffix=".jsonl")]
    assert listed == ["visits/date=2024-01-01/good.jsonl"]
    warnings = "\n".join(caplog.messages)
    assert "visits/date=2024-01-01/b.jsonl skipped: it is a named pipe (FIFO)" in warnings
    assert "visits/date=2024-01-01/gone.jsonl skipped: it is a symbolic link to nothing" in warnings
    assert "visits/date=2024-01-01/folder.jsonl skipped: it is a folder" in warnings


def test_reading_a_named_pipe_is_refused_at_once(landing, day_folder):
    """Put in place of a listed file between listing and reading: refused, never waited on."""
    os.mkfifo(day_folder / "late.jsonl")
    for read in (landing.read, landing.head):
        with pytest.raises(LandingFileError, match=r"late.jsonl: it is a named pipe \(FIFO\)"):
            read("visits/date=2024-01-01/late.jsonl")


def test_a_listing_can_stay_in_its_folder(landing, day_folder):
    (day_folder / "sub").mkdir()
    (day_folder / "sub" / "nested.jsonl").write_text("{}\n")
    assert [s.path for s in landing.list("visits", suffix=".jsonl")] == [
        "visits/date=2024-01-01/good.jsonl",
        "visits/date=2024-01-01/sub/nested.jsonl",
    ]
    assert [
        s.path
        for s in landing.list(
            str(day_folder.relative_to(landing.root)), suffix=".jsonl", recursive=False
        )
    ] == ["visits/date=2024-01-01/good.jsonl"]


def test_a_file_gone_since_its_listing_is_left_out_named(landing, day_folder, caplog):
    listed = landing.list("visits", suffix=".jsonl")
    (day_folder / "good.jsonl").unlink()
    with caplog.at_level(logging.WARNING, logger="resources.landing"):
        assert landing.fingerprints(listed) == {}
    assert "visits/date=2024-01-01/good.jsonl skipped: gone since it was listed" in caplog.text
