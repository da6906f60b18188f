"""Tool report files: what a complete line is, how a line parses, and which part of a
changed file must be (re-)ingested.

A report is UTF-8 CSV with the header `ts,in_spec,out_of_spec,mispicks`; `ts` is ISO-8601
with a UTC offset, counts are non-negative integers. Lines starting with '#' are comments
(deployments that name the subject in a header line put it there). A line is complete
only once its newline is written: a half-written last line waits for the next pass.

Well-formed files are parsed in Arrow, anything else line by line, which names the line
of every problem. This one parser runs in the run's process, or on Spark's executors when
telemetry computes there (TelemetrySettings.compute; the executors get this module with
the function), so both paths read a file to the same rows and the same errors.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import csv

from assets.source_files import MAX_REPORTED_PROBLEMS, Problem

HEADER = ("ts", "in_spec", "out_of_spec", "mispicks")
COUNTS = HEADER[1:]
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
MAX_COUNT = 2**63 - 1
"""Counts are stored as 64-bit integers; a larger one is a bad row."""
_DIGITS = re.compile(r"^[0-9]+$")
_NEGATIVE = re.compile(r"^-[0-9]+$")


def complete_length(content: bytes) -> int:
    """Bytes up to and including the last newline: the complete lines of the file."""
    return content.rfind(b"\n") + 1


def hashed_prefixes(ingested_bytes: int) -> Callable[[bytes], list[int]]:
    """The prefix lengths `plan_change` needs hashed, for `LandingZone.read(prefixes=)`:
    what was ingested of the file before, and its complete lines now."""
    return lambda content: [ingested_bytes, complete_length(content)]


def to_micros(ts: dt.datetime) -> int:
    return (ts - EPOCH) // dt.timedelta(microseconds=1)


def parse_timestamp(text: str) -> dt.datetime | str:
    """The UTC instant of an ISO-8601 timestamp with an offset, or why it is not one."""
    try:
        ts = dt.datetime.fromisoformat(text)
    except ValueError:
        return f"unparseable timestamp {text!r} (expected ISO-8601 with an offset)"
    if ts.tzinfo is None:
        return f"timestamp {text!r} has no UTC offset"
    return ts.astimezone(dt.UTC)


ROWS_SCHEMA = pa.schema(
    [
        ("line", pa.int64()),
        ("ts", pa.timestamp("us", tz="UTC")),
        *((name, pa.int64()) for name in COUNTS),
    ]
)


@dataclass(frozen=True)
class ReportRows:
    """Parsed rows of one file (or of its re-ingested tail), in line order, as Arrow
    (ROWS_SCHEMA: about 40 bytes a row)."""

    source: str
    table: pa.Table

    @classmethod
    def of(cls, source: str, columns: Mapping[str, Sequence[int]]) -> ReportRows:
        """From lists: line, ts (microseconds since the epoch, UTC) and the counts."""
        arrays = [pa.array(columns[name], pa.int64()) for name in ROWS_SCHEMA.names]
        return cls(source, pa.Table.from_arrays(arrays, names=ROWS_SCHEMA.names).cast(ROWS_SCHEMA))

    def __len__(self) -> int:
        return self.table.num_rows

    @property
    def line(self) -> pa.ChunkedArray:
        return self.table["line"]

    @property
    def start(self) -> dt.datetime | None:
        return pc.min(self.table["ts"]).as_py() if len(self) else None

    @property
    def end(self) -> dt.datetime | None:
        return pc.max(self.table["ts"]).as_py() if len(self) else None

    def to_arrow(self, subject_key: str, schema: pa.Schema) -> pa.Table:
        n = len(self)
        columns = {
            "subject_key": pa.repeat(pa.scalar(subject_key, pa.string()), n),
            "source": pa.repeat(pa.scalar(self.source, pa.string()), n),
            **{name: self.table[name] for name in ROWS_SCHEMA.names},
        }
        return pa.table({name: columns[name] for name in schema.names}).cast(schema)


@dataclass(frozen=True)
class Parsed:
    """What the run decides on about a parsed change: its rows' data span and count, and
    how many of them replace lines ingested before (an append's re-read part)."""

    start: dt.datetime | None
    end: dt.datetime | None
    row_count: int
    replaced_lines: int

    @classmethod
    def of(cls, rows: ReportRows, old_lines: int) -> Parsed:
        """`old_lines`: the change's lines up to this number were ingested before."""
        replaced = 0
        if old_lines:
            replaced = pc.sum(pc.less_equal(rows.line, old_lines)).as_py() or 0
        return cls(rows.start, rows.end, len(rows), replaced)


def unreadable(error: OSError) -> str:
    """Why a listed file could not be read, as its problem says it."""
    if isinstance(error, FileNotFoundError):
        return "gone since it was listed"
    return f"cannot be read: {error.strerror or error}"


class ReportFileError(ValueError):
    """A report file (or its new tail) that cannot be ingested; nothing of it was written."""

    def __init__(self, source: str, problems: Sequence[Problem]) -> None:
        self.source = source
        self.problems = list(problems)
        super().__init__("; ".join(str(p) for p in self.problems))

    @property
    def first_line(self) -> int | None:
        return self.problems[0].line if self.problems else None


def _line_problem(fields: list[str]) -> str | None:
    if len(fields) != len(HEADER):
        return f"expected {len(HEADER)} fields ({','.join(HEADER)}), found {len(fields)}"
    for name, value in zip(COUNTS, fields[1:], strict=True):
        if _NEGATIVE.match(value):
            return f"negative count {name}={_shown(value)}"
        if not _DIGITS.match(value):
            return f"{name} is not a non-negative integer: {_shown(value)}"
        # Checked on the digits before any conversion: 10 MB of them would not convert.
        if len(value.lstrip("0")) > len(str(MAX_COUNT)) or int(value) > MAX_COUNT:
            return f"{name} is out of range (at most {MAX_COUNT}): {_shown(value)}"
    return None


def _shown(value: str, limit: int = 40) -> str:
    """A value as an error message quotes it: a huge one cut short, with its length."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value):,} characters)"


def parse_report(
    source: str,
    content: bytes,
    *,
    first_line: int,
    expect_header: bool,
    latest: dt.datetime | None = None,
) -> ReportRows:
    """Parse complete lines (`content` ends at a newline), numbering them from
    `first_line`. Raises ReportFileError naming file and line of the first problems. A
    `ts` after `latest` (the time of ingestion plus the allowed skew) is a bad row: one
    absurd future timestamp must not become the subject's newest data."""
    rows = parse_well_formed(
        source, content, first_line=first_line, expect_header=expect_header, latest=latest
    )
    if rows is not None:
        return rows
    return parse_lines(
        source, content, first_line=first_line, expect_header=expect_header, latest=latest
    )


_HEADER_LINE = (",".join(HEADER) + "\n").encode()
_STRICT_TS = (
    r"^[1-9][0-9]{3}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?"
    r"(Z|[+-][0-9]{2}:[0-9]{2})$"
)
_STRICT_COUNT_DIGITS = 18


def _strict_counts(values: pa.ChunkedArray) -> bool:
    """Every value 1 to 18 ASCII digits (what a regex would say, at a fifth of the cost)."""
    return bool(
        pc.all(pc.ascii_is_decimal(values)).as_py()
        and pc.max(pc.binary_length(values)).as_py() <= _STRICT_COUNT_DIGITS
    )


def parse_well_formed(
    source: str,
    content: bytes,
    *,
    first_line: int,
    expect_header: bool,
    latest: dt.datetime | None = None,
) -> ReportRows | None:
    """The common case, vectorized in Arrow (a 25,000-row file in milliseconds, not a
    tenth of a second): the exact header where one is expected, then only data lines in
    the strictest form the line parser accepts (no blanks, comments, spaces, quotes, BOM;
    `ts` as YYYY-MM-DDTHH:MM:SS[.ffffff] with Z or ±HH:MM). None for anything else, which
    the line parser then reads, naming each problem's line; both read the strict form to
    the same instants and counts."""
    if expect_header:
        if not content.startswith(_HEADER_LINE):
            return None
        content, first_line = content[len(_HEADER_LINE) :], first_line + 1
    lines = content.count(b"\n")
    if lines == 0:
        return None
    try:
        table = csv.read_csv(
            pa.py_buffer(content),
            read_options=csv.ReadOptions(column_names=list(HEADER), use_threads=False),
            parse_options=csv.ParseOptions(quote_char=False, ignore_empty_lines=False),
            convert_options=csv.ConvertOptions(
                column_types=dict.fromkeys(HEADER, pa.string()), strings_can_be_null=False
            ),
        )
        if (
            table.num_rows != lines
            or not pc.all(pc.match_substring_regex(table["ts"], _STRICT_TS)).as_py()
        ):
            return None
        if not all(_strict_counts(table[name]) for name in COUNTS):
            return None
        ts = pc.cast(table["ts"], pa.timestamp("us", tz="UTC"))
        if latest is not None and pc.max(ts).as_py() > latest:
            return None
    except pa.ArrowInvalid:  # e.g. a ragged line, or 30 February: the line parser says which
        return None
    columns = {name: pc.cast(table[name], pa.int64()) for name in COUNTS}
    lines_numbered = pa.array(range(first_line, first_line + lines), pa.int64())
    return ReportRows(
        source,
        pa.table({"line": lines_numbered, "ts": ts, **columns}, schema=ROWS_SCHEMA),
    )


def parse_lines(
    source: str,
    content: bytes,
    *,
    first_line: int,
    expect_header: bool,
    latest: dt.datetime | None = None,
) -> ReportRows:
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as e:
        line = first_line + content[: e.start].count(b"\n")
        raise ReportFileError(
            source, [Problem(source, line, f"not valid UTF-8 ({e.reason})")]
        ) from e
    rows: dict[str, list[int]] = {name: [] for name in ROWS_SCHEMA.names}
    problems: list[Problem] = []
    header_seen = not expect_header
    lines = text.split("\n")[:-1]  # the text ends with a newline
    for number, raw in enumerate(lines, start=first_line):
        stripped = raw.strip().lstrip("\ufeff")
        if not stripped or stripped.startswith("#"):
            continue
        fields = [f.strip() for f in stripped.split(",")]
        if not header_seen:
            header_seen = True
            if tuple(fields) != HEADER:
                problems.append(
                    Problem(
                        source, number, f"header is {stripped!r}, expected {','.join(HEADER)!r}"
                    )
                )
                break
            continue
        problem = _line_problem(fields)
        ts = parse_timestamp(fields[0]) if problem is None else None
        if isinstance(ts, str):
            problem = ts
        elif ts is not None and latest is not None and ts > latest:
            problem = (
                f"timestamp {fields[0]!r} is in the future: later than {latest.isoformat()}, "
                "the time of ingestion plus max_future_skew_hours"
            )
        if problem is not None or not isinstance(ts, dt.datetime):
            problems.append(Problem(source, number, problem or "no timestamp"))
            if len(problems) >= MAX_REPORTED_PROBLEMS:
                break
            continue
        rows["line"].append(number)
        rows["ts"].append(to_micros(ts))
        for name, value in zip(COUNTS, fields[1:], strict=True):
            rows[name].append(int(value))
    if expect_header and not header_seen and not problems:
        problems.append(Problem(source, None, "no header line"))
    if problems:
        raise ReportFileError(source, problems)
    return ReportRows.of(source, rows)


ChangeKind = Literal["new", "append", "rewrite"]


@dataclass(frozen=True)
class FileChange:
    """The part of a file to (re-)ingest: its complete lines from `from_byte` (line
    `from_line`) to `end_byte`; the raw table's rows of the file from `from_line` on are
    replaced by them."""

    source: str
    kind: ChangeKind
    from_byte: int
    from_line: int
    end_byte: int
    end_hash: str
    """SHA-256 of the file's first `end_byte` bytes: what is ingested once this is."""

    @property
    def expect_header(self) -> bool:
        return self.from_byte == 0


def back_correction_start(
    content: bytes, ingested_bytes: int, previous_end: dt.datetime, window: dt.timedelta
) -> tuple[int, int]:
    """(byte offset, line number) of the first line to re-ingest when a file grew: walking
    back from the end of what was ingested, every line whose ts is within `window` of
    the previous end is taken again; the walk stops at the first older line."""
    cutoff = previous_end - window
    start = ingested_bytes
    while start > 0:
        line_start = content.rfind(b"\n", 0, start - 1) + 1
        first_field = content[line_start : start - 1].split(b",", 1)[0]
        ts = parse_timestamp(first_field.decode("utf-8", errors="replace").strip())
        if isinstance(ts, str) or ts < cutoff:
            break
        start = line_start
    return start, content.count(b"\n", 0, start) + 1


def plan_change(
    *,
    source: str,
    content: bytes,
    ingested_bytes: int,
    ingested_hash: str | None,
    logical_end: dt.datetime | None,
    window: dt.timedelta,
    prefix_sha256: Mapping[int, str],
    force_rewrite: bool = False,
) -> FileChange | None:
    """What to ingest of `content` given what was ingested of the file before (its first
    `ingested_bytes`, hashing to `ingested_hash`); `prefix_sha256` holds the hashes of
    the prefixes `hashed_prefixes` names. None: no new complete line."""
    end = complete_length(content)
    end_hash = prefix_sha256[end]
    if ingested_hash is None:
        return FileChange(source, "new", 0, 1, end, end_hash) if end else None
    grown = not force_rewrite and end >= ingested_bytes
    if not (grown and prefix_sha256[ingested_bytes] == ingested_hash):
        return FileChange(source, "rewrite", 0, 1, end, end_hash)
    if end == ingested_bytes:
        return None
    if logical_end is None:  # nothing but the header so far
        return FileChange(source, "append", 0, 1, end, end_hash)
    from_byte, from_line = back_correction_start(content, ingested_bytes, logical_end, window)
    return FileChange(source, "append", from_byte, from_line, end, end_hash)
