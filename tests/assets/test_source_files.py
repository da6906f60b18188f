"""Landed files read by Spark on the executors: lines numbered per file, hashes that match
the sensors', and file names or bytes that would trip a naive reader."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from assets.source_files import (
    EMPTY_SHA256,
    LINES_PER_PARTITION_BYTES,
    SourceDataError,
    checked_facts,
    read_lines,
)
from resources.landing import LandingZone

AWKWARD_NAME = "visits/date=2024-01-01/we[i]rd {a,b} it's 100%25 ü*?.jsonl"


def land(landing: LandingZone, path: str, content: bytes) -> Path:
    full = Path(landing.root) / path
    full.parent.mkdir(parents=True, exist_ok=True)
    full.write_bytes(content)
    return full


def lines_of(spark, landing, paths):
    stats = [landing.stat(path) for path in paths]
    rows = read_lines(spark.session(), landing, stats).cache()
    return rows, checked_facts("x", rows, no_problem(), stats)


def no_problem():
    """A `problem` column that finds none."""
    return F.lit(None).cast("string")


def test_lines_are_numbered_per_file_and_hashed_like_the_sensors_hash(spark, landing):
    content = b'\xef\xbb\xbf{"a": 1}\r\n\n   \n{"a": 2}\n{"a": 3}'
    land(landing, AWKWARD_NAME, content)
    land(landing, "visits/date=2024-01-01/plain.jsonl", b"x\ny\n")
    rows, facts = lines_of(spark, landing, [AWKWARD_NAME, "visits/date=2024-01-01/plain.jsonl"])
    got = sorted((r.source_file, r.source_line, r.text) for r in rows.collect())
    assert got == [
        ("visits/date=2024-01-01/plain.jsonl", 1, "x"),
        ("visits/date=2024-01-01/plain.jsonl", 2, "y"),
        (AWKWARD_NAME, 1, '{"a": 1}'),  # byte-order mark and CR dropped
        (AWKWARD_NAME, 4, '{"a": 2}'),  # blank lines skipped, still counted
        (AWKWARD_NAME, 5, '{"a": 3}'),
    ]
    assert facts.lines == 5
    by_path = {f.path: f for f in facts.fingerprints}
    assert by_path[AWKWARD_NAME].sha256 == hashlib.sha256(content).hexdigest()
    assert by_path[AWKWARD_NAME].size == len(content)
    for stat in landing.list("visits", suffix=".jsonl"):
        assert landing.fingerprint(stat).sha256 == by_path[stat.path].sha256


def test_a_big_input_is_spread_over_partitions_and_keeps_its_line_numbers(spark, landing):
    """Over `LINES_PER_PARTITION_BYTES` the lines are parsed by several tasks: each keeps
    its file, number and text, and the facts are those of the whole file."""
    line = b'{"pad": "' + b"x" * 200 + b'"}'
    count = LINES_PER_PARTITION_BYTES // len(line) + 1_000
    content = b"\n".join(line.replace(b"x" * 7, b"%07d" % i, 1) for i in range(1, count + 1))
    land(landing, "big/all.jsonl", content)
    rows, facts = lines_of(spark, landing, ["big/all.jsonl"])
    assert rows.select(F.spark_partition_id()).distinct().count() > 1
    numbered = rows.select("source_line", F.substring("text", 10, 7).cast("int").alias("n")).where(
        F.col("source_line") != F.col("n")
    )
    assert numbered.count() == 0
    assert facts.lines == count
    assert facts.fingerprints[0].sha256 == hashlib.sha256(content).hexdigest()


def test_invalid_utf8_is_named_on_its_line(spark, landing):
    land(landing, "x/bad.jsonl", b"fine\nalso fine\n\xff\xfe broken\nlast\n")
    rows, _ = lines_of(spark, landing, ["x/bad.jsonl"])
    problems = [(r.source_line, r.read_problem) for r in rows.collect() if r.read_problem]
    assert problems == [(3, "not valid UTF-8")]
    # The facts are taken only of files whose every line is valid.
    with pytest.raises(SourceDataError, match=r"x/bad.jsonl:3: not valid UTF-8"):
        checked_facts("x", rows, F.col("read_problem"), [landing.stat("x/bad.jsonl")])


def test_blank_and_empty_files_keep_their_facts(spark, landing):
    land(landing, "x/blank.jsonl", b"\n  \n\n")
    land(landing, "x/empty.jsonl", b"")
    rows, facts = lines_of(spark, landing, ["x/blank.jsonl", "x/empty.jsonl"])
    assert [(r.source_file, r.source_line, r.text) for r in rows.collect()] == [
        ("x/blank.jsonl", None, None)
    ]
    assert facts.lines == 0
    assert [(f.path, f.sha256) for f in facts.fingerprints] == [
        ("x/blank.jsonl", hashlib.sha256(b"\n  \n\n").hexdigest()),
        ("x/empty.jsonl", EMPTY_SHA256),
    ]


def test_a_name_hadoop_cannot_read_is_refused_by_name(spark, landing):
    land(landing, "x/10:00.jsonl", b"{}\n")
    with pytest.raises(SourceDataError, match=r"x/10:00.jsonl: ':' in a file name"):
        lines_of(spark, landing, ["x/10:00.jsonl"])


def test_a_file_emptied_while_read_is_named(spark, landing):
    full = land(landing, "x/going.jsonl", b"{}\n")
    stat = landing.stat("x/going.jsonl")
    full.write_bytes(b"")
    rows = read_lines(spark.session(), landing, [stat])
    with pytest.raises(SourceDataError, match=r"x/going.jsonl: emptied or removed while"):
        checked_facts("x", rows, no_problem(), [stat])
