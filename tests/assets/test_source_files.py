"""Landed files read by Spark on the executors: lines numbered per file, hashes that match
the sensors', and file names or bytes that would trip a naive reader."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from assets.source_files import (
    EMPTY_SHA256,
    Block,
    SourceDataError,
    WholeFile,
    checked_facts,
    number_blocks,
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
    """A file of 16 MiB is read in blocks by several tasks (Spark splits it over the
    session's cores), small files read with it share their tasks: each line keeps its
    file, number and text, blank lines counted across the blocks, and the facts are those
    of the whole file."""
    line = b'{"pad": "' + b"x" * 200 + b'"}'
    count = 16 * 2**20 // len(line)
    content = b"\n".join(
        b"" if i % 997 == 0 else line.replace(b"x" * 7, b"%07d" % i, 1) for i in range(1, count + 1)
    )
    land(landing, "big/all.jsonl", content)
    small = [f"big/small-{i}.jsonl" for i in range(3)]
    for i, path in enumerate(small):
        land(landing, path, b"\n" * i + b"first\r\n\n  \nlast")
    rows, facts = lines_of(spark, landing, ["big/all.jsonl", *small])
    big = rows.where(F.col("source_file") == "big/all.jsonl")
    assert big.select(F.spark_partition_id()).distinct().count() > 1
    numbered = big.select("source_line", F.substring("text", 10, 7).cast("int").alias("n")).where(
        F.col("source_line") != F.col("n")
    )
    assert numbered.count() == 0
    assert sorted(
        (r.source_file, r.source_line, r.text)
        for r in rows.where(F.col("source_file") != "big/all.jsonl").collect()
    ) == [
        (path, i + n, text)
        for i, path in enumerate(small)
        for n, text in ((1, "first"), (4, "last"))
    ]
    assert facts.lines_by_file["big/all.jsonl"] == count - count // 997
    by_path = {f.path: f for f in facts.fingerprints}
    assert by_path["big/all.jsonl"].sha256 == hashlib.sha256(content).hexdigest()


def test_a_lone_carriage_return_is_part_of_its_line(spark, landing):
    """Lines end at "\\n" (the "\\r" of "\\r\\n" dropped); a "\\r" elsewhere is a
    character of its line, as JSON takes it for white space."""
    land(landing, "x/cr.jsonl", b"a\rb\r\nc\r\r\n\rd")
    rows, _ = lines_of(spark, landing, ["x/cr.jsonl"])
    assert sorted((r.source_line, r.text) for r in rows.collect()) == [
        (1, "a\rb"),
        (2, "c\r"),
        (3, "\rd"),
    ]


def test_invalid_utf8_is_named_on_its_line(spark, landing):
    land(landing, "x/bad.jsonl", b"fine\nalso fine\n\xff\xfe broken\nlast\n")
    rows, _ = lines_of(spark, landing, ["x/bad.jsonl"])
    problems = [(r.source_line, r.read_problem, r.text) for r in rows.collect() if r.read_problem]
    # The undecodable bytes are shown as U+FFFD: the line is text (Spark Connect's Arrow
    # batches would refuse it otherwise).
    assert problems == [(3, "not valid UTF-8", "\ufffd\ufffd broken")]
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


def test_blocks_are_numbered_in_file_order_and_a_file_changed_between_reads_is_refused():
    """`number_blocks` decides where each block's lines start: after every line of the
    file's earlier blocks (given in any order), and never for a file whose hash, blocks
    and listing once both were read do not agree on its size and mtime."""
    hashed = [
        WholeFile("a.jsonl", 300, 7, "sha-a"),
        WholeFile("b.jsonl", 10, 7, "sha-b"),
        WholeFile("blank.jsonl", 3, 7, "sha-blank"),
    ]
    blocks = [
        Block("a.jsonl", "file:/a.jsonl", 200, 300, 7, 4, 40, 4),
        Block("a.jsonl", "file:/a.jsonl", 0, 300, 7, 5, 0, 5),
        Block("a.jsonl", "file:/a.jsonl", 100, 300, 7, 6, 8589934592, 3),
        Block("b.jsonl", "file:/b.jsonl", 0, 10, 7, 2, 5, 2),
        Block("blank.jsonl", "file:/blank.jsonl", 0, 3, 7, 3, 7, 0),
    ]
    listed = {whole.path: (whole.size, whole.mtime_ms) for whole in hashed}
    numbering = number_blocks(hashed, blocks, listed)
    assert [row[:5] for row in numbering.first_lines] == [
        ("file:/a.jsonl", 0, "a.jsonl", 0, 0),
        ("file:/a.jsonl", 100, "a.jsonl", 5, 8589934592),
        ("file:/a.jsonl", 200, "a.jsonl", 11, 40),
        ("file:/b.jsonl", 0, "b.jsonl", 0, 5),
        ("file:/blank.jsonl", 0, "blank.jsonl", 0, 7),
    ]
    assert {row[5] for row in numbering.first_lines} == {"sha-a", "sha-b", "sha-blank"}
    assert numbering.without_lines == [hashed[2]]
    grown = [*blocks[:3], Block("b.jsonl", "file:/b.jsonl", 0, 12, 8, 2, 5, 2)]
    with pytest.raises(SourceDataError, match=r"b.jsonl: changed while it was read") as error:
        number_blocks(hashed, grown, listed)
    assert [p.file for p in error.value.problems] == ["b.jsonl"]
    for after in ({**listed, "a.jsonl": (300, 9)}, {**listed, "a.jsonl": None}):
        with pytest.raises(SourceDataError, match=r"a.jsonl: changed while it was read"):
            number_blocks(hashed, blocks, after)
    with pytest.raises(SourceDataError, match=r"c.jsonl: changed while it was read"):
        number_blocks(hashed, [Block("c.jsonl", "file:/c.jsonl", 0, 1, 7, 1, 0, 1)], listed)
