"""Parsing report files and planning what of a changed file to ingest (pure)."""

from __future__ import annotations

import datetime as dt
import hashlib

import pytest

from assets.telemetry.report_files import (
    ReportFileError,
    back_correction_start,
    complete_length,
    hashed_prefixes,
    parse_lines,
    parse_report,
    parse_well_formed,
    plan_change,
)

HEAD = b"ts,in_spec,out_of_spec,mispicks\n"
L1 = b"2024-05-01T00:00:00Z,1,0,0\n"
L2 = b"2024-05-01T02:00:01+02:00,2,1,0\n"  # 00:00:01 UTC
L3 = b"2024-05-01T00:00:09Z,3,0,1\n"
WINDOW = dt.timedelta(seconds=5)


def sha256(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def test_offsets_normalize_to_utc_and_lines_are_numbered_from_the_header():
    rows = parse_report("f.csv", HEAD + L1 + b"\n" + L2, first_line=1, expect_header=True)
    assert rows.line.to_pylist() == [2, 4]
    assert rows.start == dt.datetime(2024, 5, 1, tzinfo=dt.UTC)
    assert rows.end == dt.datetime(2024, 5, 1, 0, 0, 1, tzinfo=dt.UTC)


def outcome(parse, content: bytes, expect_header: bool):
    """The rows a parser reads, or the error it names."""
    try:
        return parse("f.csv", content, first_line=1, expect_header=expect_header)
    except ReportFileError as error:
        return str(error)


@pytest.mark.parametrize(
    "body",
    [
        L1 + L2 + L3,
        b"2024-02-29T23:59:59.5-05:00,7,0,3\n2024-05-01T00:00:00.123456+23:59,0,0,0\n",
        L1 + b"\n" + L2,  # a blank line
        b"# subject: Tool01\n" + L1,  # a comment
        b" 2024-05-01T00:00:00Z , 1,0,0\n",  # spaces around fields
        b"2024-05-01 00:00:00+00:00,1,0,0\n",  # a space instead of T
        b"2024-05-01T00:00:00+0200,1,0,0\n",  # an offset without a colon
        b"2024-05-01T00:00:00+12:60,1,0,0\n",  # an offset only Python reads
        b"0999-05-01T00:00:00Z,1,0,0\n",
        b"\xef\xbb\xbf" + L1,  # a byte order mark
        b"2024-05-01T00:00:00Z,+1,0,0\n",  # a signed count
        "2024-05-01T00:00:00Z,\uff11,0,0\n".encode(),  # a full-width digit
        b"2024-05-01T00:00:00Z,0000000000000000001,0,0\n",  # 19 digits, leading zeros
        b"2024-05-01T00:00:00Z,9223372036854775807,0,0\n",  # the largest count
    ],
)
def test_the_vectorized_parser_reads_exactly_what_the_line_parser_reads(body):
    """Well-formed input takes the Arrow path; anything else falls through to the line
    parser. Either way the rows are the line parser's."""
    for content, expect_header in ((HEAD + body, True), (body, False)):
        fast = outcome(parse_report, content, expect_header)
        slow = outcome(parse_lines, content, expect_header)
        assert fast == slow
    assert parse_well_formed("f.csv", HEAD + L1 + L2 + L3, first_line=1, expect_header=True)


def test_a_half_written_last_line_is_not_complete():
    content = HEAD + L1 + b"2024-05-01T00:0"
    assert complete_length(content) == len(HEAD + L1)
    assert complete_length(b"ts,in_sp") == 0


@pytest.mark.parametrize(
    "body, message",
    [
        (b"2024-05-01T00:00:00Z;1;0;0\n", "f.csv:2: expected 4 fields"),
        (
            b"2024-05-01T00:00:00Z,1,x,0\n",
            "f.csv:2: out_of_spec is not a non-negative integer: 'x'",
        ),
        (b"2024-05-01T00:00:00Z,-1,0,0\n", "f.csv:2: negative count in_spec='-1'"),
        (
            b"2024-05-01T00:00:00Z,99999999999999999999,0,0\n",
            "f.csv:2: in_spec is out of range \\(at most 9223372036854775807\\): "
            "'99999999999999999999'",
        ),
        (
            b"2024-05-01T00:00:00Z,1,0," + b"9" * 10_000_000 + b"\n",
            "f.csv:2: mispicks is out of range .*'9999999999.*'... \\(10,000,000 characters\\)",
        ),
        (
            b"2999-01-01T00:00:00Z,1,0,0\n",
            "f.csv:2: timestamp '2999-01-01T00:00:00Z' is in the future: later than "
            "2024-05-02T00:00:00\\+00:00",
        ),
        (b"05/01/2024,1,0,0\n", "f.csv:2: unparseable timestamp '05/01/2024'"),
        (b"\xff\xfe,1,0,0\n", "f.csv:2: not valid UTF-8"),
    ],
)
def test_bad_lines_are_named_by_file_and_line(body, message):
    latest = dt.datetime(2024, 5, 2, tzinfo=dt.UTC)  # ingested on May 1st, one day of skew
    with pytest.raises(ReportFileError, match=message):
        parse_report("f.csv", HEAD + L1 + body, first_line=0, expect_header=True, latest=latest)


def test_a_wrong_header_is_named():
    with pytest.raises(ReportFileError, match="f.csv:1: header is 'time,a,b,c'"):
        parse_report("f.csv", b"time,a,b,c\n" + L1, first_line=1, expect_header=True)


def plan(content: bytes, ingested: bytes | None, logical_end: dt.datetime | None = None):
    """plan_change for a file now holding `content` whose `ingested` bytes were ingested
    before (None: never), with its prefixes hashed as `LandingZone.read` hashes them."""
    ingested_bytes = len(ingested) if ingested is not None else 0
    cuts = hashed_prefixes(ingested_bytes)(content)
    return plan_change(
        source="f",
        content=content,
        ingested_bytes=ingested_bytes,
        ingested_hash=sha256(ingested) if ingested is not None else None,
        logical_end=logical_end,
        window=WINDOW,
        prefix_sha256={cut: sha256(content[:cut]) for cut in cuts},
    )


def test_plan_new_append_rewrite_and_nothing_new():
    old = HEAD + L1 + L2
    new = plan(old, None)
    assert (new.kind, new.from_byte, new.end_byte, new.end_hash) == (
        "new",
        0,
        len(old),
        sha256(old),
    )

    end = dt.datetime(2024, 5, 1, 0, 0, 1, tzinfo=dt.UTC)
    append = plan(old + L3 + b"2024-05", old, end)
    # Back-correction: L1 and L2 are within 5 s of the previous end, so both are re-read.
    assert (append.kind, append.from_line, append.end_byte) == ("append", 2, len(old + L3))
    assert append.end_hash == sha256(old + L3)  # the half-written line is not part of it

    rewritten = plan(HEAD + L3, old, end)
    assert (rewritten.kind, rewritten.from_byte, rewritten.end_hash) == (
        "rewrite",
        0,
        sha256(HEAD + L3),
    )
    shrunk = plan(HEAD, old, end)
    assert (shrunk.kind, shrunk.end_byte) == ("rewrite", len(HEAD))
    assert plan(old + b"2024", old, end) is None


def test_back_correction_stops_at_the_first_line_older_than_the_window():
    content = HEAD + L1 + L3  # 00:00:00 and 00:00:09
    end = dt.datetime(2024, 5, 1, 0, 0, 9, tzinfo=dt.UTC)
    assert back_correction_start(content, len(content), end, WINDOW) == (len(HEAD + L1), 3)
    assert back_correction_start(content, len(content), end, dt.timedelta(0)) == (len(HEAD + L1), 3)
    assert back_correction_start(content, len(content), end, dt.timedelta(hours=1)) == (
        len(HEAD),
        2,
    )
