import hashlib
import os
from pathlib import Path

import pytest

from resources.landing import sources_digest


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
