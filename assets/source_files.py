"""Landed source files read by Spark, as numbered lines, and bad input as clear errors.

Spark's executors read the files (`binaryFile`): in one task per file they hash the bytes
and split them into lines numbered from 1, so the content hash and the parsed rows come
from the same bytes, and neither the bytes nor the rows pass through the Dagster process.
That process only lists the files (size and mtime, no content) and collects what is small:
one fact row per file and the first rejected lines, named by file and line. Nothing is
written while any line is rejected.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from resources.landing import FileStat, Fingerprint, LandingZone

MAX_REPORTED_PROBLEMS = 10
K = TypeVar("K", bound=Hashable)
LINES_PER_PARTITION_BYTES = 16 * 2**20
MAX_FILE_BYTES = 2**31 - 1
"""Spark holds a file's bytes in one array (`spark.sql.sources.binaryFile.maxLength`).
Executors need a few times the largest file in memory: split bigger inputs into files."""
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_GLOB_CHARACTERS = re.compile(r"([\\\[\]{}*?])")
LINE_FACTS = ("source_file", "source_line", "source_size", "source_mtime", "source_sha256")
"""Where a line comes from: what `checked_facts` needs of the rows it is given."""


@dataclass(frozen=True)
class Problem:
    file: str
    line: int | None
    reason: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.reason}"


class SourceDataError(ValueError):
    """Source files that cannot be ingested; nothing was written."""

    def __init__(self, source: str, problems: Sequence[Problem], *, more: bool = False) -> None:
        self.source = source
        self.problems = list(problems)
        self.more = more
        lines = "\n".join(f"  {p}" for p in self.problems)
        tail = "\n  ... and more" if more else ""
        super().__init__(f"rejected {source} source data (nothing was written):\n{lines}{tail}")


class SourceDataErrors(SourceDataError):
    """Bad lines of several groups of files read in one pass (a range's days), each
    group's own error worded as a read of that group alone would word it. Read as one
    error, it names the first problems of them all."""

    def __init__(self, source: str, errors: Mapping[Hashable, SourceDataError]) -> None:
        self.errors = dict(errors)
        problems = [problem for error in self.errors.values() for problem in error.problems]
        more = len(problems) > MAX_REPORTED_PROBLEMS or any(e.more for e in self.errors.values())
        super().__init__(source, problems[:MAX_REPORTED_PROBLEMS], more=more)

    def of(self, groups: Collection[K]) -> dict[K, SourceDataError] | None:
        """Each group's error, when every group named is one of `groups`; else None (a
        problem that belongs to none of them)."""
        found = {group: self.errors[group] for group in groups if group in self.errors}
        return found if len(found) == len(self.errors) else None


def empty_files(files: Sequence[FileStat]) -> list[Problem]:
    """0-byte files, which Spark skips without a word: a source that must not be empty
    names them."""
    return [Problem(stat.path, None, "file is empty") for stat in files if stat.size == 0]


def _hadoop_path(landing: LandingZone, path: str) -> str:
    """The absolute path Spark is given, with Hadoop's glob characters escaped so a
    file named `a[1].jsonl` is read as itself."""
    return _GLOB_CHARACTERS.sub(r"\\\1", str(landing.absolute(path)))


def _unreadable_by_spark(files: Sequence[FileStat]) -> list[Problem]:
    """Files Spark cannot read, found from their listing alone."""
    problems = []
    for stat in files:
        if ":" in stat.path.rsplit("/", 1)[-1]:
            # Hadoop's Path parses what precedes a ':' in a name as a URI scheme.
            problems.append(Problem(stat.path, None, "':' in a file name: rename the file"))
        elif stat.size > MAX_FILE_BYTES:
            problems.append(
                Problem(stat.path, None, f"{stat.size} bytes, over {MAX_FILE_BYTES}: split it")
            )
    return problems


def read_lines(spark: SparkSession, landing: LandingZone, files: Sequence[FileStat]) -> DataFrame:
    """The lines of `files`, read on Spark's executors, with `LINE_FACTS`, `text` and
    `read_problem`:

    - `source_file` (landing path), `source_line` (from 1; blank lines are skipped but
      counted) and `text` (without line break; a leading UTF-8 byte-order mark dropped);
    - `read_problem`: "not valid UTF-8" on the lines of an invalid file that hold
      undecodable bytes (shown as U+FFFD once decoded), else null;
    - `source_size`, `source_mtime` and `source_sha256` of the line's file, so per-file
      facts come from the rows themselves (`checked_facts`).

    A file without any non-blank line keeps one row, with a null `text` and `source_line`,
    so its facts are never lost; empty (0-byte) files have no row at all (Spark skips
    them). Callers decide what an empty file means.
    """
    problems = _unreadable_by_spark(files)
    if problems:
        raise SourceDataError("landed", problems)
    readable = [stat for stat in files if stat.size > 0]
    if not readable:
        return spark.createDataFrame(
            [],
            "source_file string, source_line int, text string, read_problem string, "
            "source_size long, source_mtime timestamp, source_sha256 string",
        )
    # Spark names files `file:<absolute path>` (Hadoop's rendering of a local path).
    prefix = f"file:{landing.absolute('')}/"
    try:
        loaded = spark.read.format("binaryFile").load(
            [_hadoop_path(landing, stat.path) for stat in readable]
        )
        # Resolved now, not at the first action: Spark Connect plans lazily, and a file
        # gone since the listing must be named here whichever way the run reaches Spark.
        loaded.schema  # noqa: B018
    except AnalysisException as error:
        gone = [stat for stat in readable if not landing.absolute(stat.path).is_file()]
        if error.getCondition() != "PATH_NOT_FOUND" or not gone:
            raise
        raise SourceDataError(
            "landed", [Problem(stat.path, None, "gone since it was listed") for stat in gone]
        ) from error
    documents = (
        loaded.select(
            F.substring(F.col("path"), len(prefix) + 1, 2**31 - 1).alias("source_file"),
            F.col("length").alias("source_size"),
            F.col("modificationTime").alias("source_mtime"),
            F.sha2(F.col("content"), 256).alias("source_sha256"),
            F.col("content").cast("string").alias("content"),
        )
        # Facts of the whole file are computed here, once per file: in the projection
        # beside the explode below they would be evaluated again for every line.
        .withColumn("valid_utf8", F.is_valid_utf8("content"))
        .withColumn("has_line", ~F.col("content").rlike(r"^\ufeff?\s*$"))
    )
    lines = documents.select(
        "source_file",
        "source_size",
        "source_mtime",
        "source_sha256",
        "valid_utf8",
        "has_line",
        F.posexplode(F.split("content", r"\r?\n")).alias("position", "text"),
    ).withColumn(
        "text",
        F.when(F.col("position") == 0, F.regexp_replace("text", "^\ufeff", "")).otherwise(
            F.col("text")
        ),
    )
    kept = lines.where(F.col("text").rlike(r"\S") | (~F.col("has_line") & (F.col("position") == 0)))
    rows = kept.select(
        "source_file",
        F.when(F.col("has_line"), F.col("position") + 1).cast("int").alias("source_line"),
        F.when(F.col("has_line"), F.col("text")).alias("text"),
        F.when(
            ~F.col("valid_utf8") & F.contains("text", F.lit("\ufffd")), F.lit("not valid UTF-8")
        ).alias("read_problem"),
        "source_size",
        "source_mtime",
        "source_sha256",
    )
    # A file is one row until it is split into lines, so every line of a big file would be
    # parsed in the one task that read it: big inputs are spread over a partition per
    # `LINES_PER_PARTITION_BYTES` (small ones stay as they are, without a shuffle). Hashed
    # by line number, not dealt round-robin: a round-robin shuffle sorts every line first
    # to stay deterministic on a retry (the one task reading a 1M-line file took 5.6 s
    # dealing round-robin, 3.5 s hashing); a hash is deterministic as it is.
    partitions = -(-sum(stat.size for stat in readable) // LINES_PER_PARTITION_BYTES)
    return rows.repartition(partitions, "source_line") if partitions > 1 else rows


@dataclass(frozen=True)
class FileFacts:
    fingerprints: list[Fingerprint]
    """One per listed file, in path order."""
    lines: int
    """Non-blank lines read."""
    lines_by_file: dict[str, int]
    """Non-blank lines read, per file (landing path)."""


def checked_facts(
    source: str,
    rows: DataFrame,
    problem: Column,
    files: Sequence[FileStat],
    *,
    per: Column | None = None,
) -> FileFacts:
    """Fingerprints and line count of `files` from rows of `read_lines` (cache them first:
    this is one more job over them), once no line has a `problem`: SourceDataError names
    the first rejected lines otherwise (`first_problems`, `per` group). The lines'
    problems are counted in the job that takes the facts, so valid files cost one job,
    not two.

    A listed file Spark did not see was emptied or removed while the run read it."""
    seen = {
        row.source_file: row
        for row in rows.groupBy("source_file")
        .agg(
            F.first("source_size").alias("size"),
            F.first("source_mtime").alias("mtime"),
            F.first("source_sha256").alias("sha256"),
            F.count("source_line").alias("lines"),
            F.count(problem).alias("problems"),
        )
        .collect()
    }
    if any(row.problems for row in seen.values()):
        first_problems(source, rows, problem, per=per)
    counted = dict(seen)
    lines = sum(row.lines for row in seen.values())
    fingerprints, problems = [], []
    for stat in sorted(files, key=lambda s: s.path):
        row = seen.pop(stat.path, None)
        if row is not None:
            mtime_ns = int(row.mtime.timestamp() * 1_000_000) * 1000
            fingerprints.append(Fingerprint(stat.path, row.size, mtime_ns, row.sha256))
        elif stat.size == 0:
            fingerprints.append(Fingerprint(stat.path, 0, stat.mtime_ns, EMPTY_SHA256))
        else:
            problems.append(Problem(stat.path, None, "emptied or removed while it was read"))
    if problems:
        raise SourceDataError("landed", problems)
    if seen:
        raise RuntimeError(f"Spark read files that were not listed: {sorted(seen)[:5]}")
    return FileFacts(fingerprints, lines, {path: row.lines for path, row in counted.items()})


def first_problems(
    source: str, rows: DataFrame, problem: Column, *, per: Column | None = None
) -> None:
    """Raise SourceDataError naming the first rejected lines (by file and line), if any.

    With `per` (a range's day, say), SourceDataErrors names the first rejected lines of
    each of its values, in one job: every bad group is known after one pass, each listed
    as a read of that group alone would list it, where one list capped for all of them
    would name only the first few groups."""
    group = per if per is not None else F.lit(None)
    order = ("source_file", "source_line")
    bad = rows.where(problem.isNotNull()).select(
        group.alias("group"), *order, problem.alias("problem")
    )
    if per is None:
        first = bad.orderBy(*order).limit(MAX_REPORTED_PROBLEMS + 1).collect()
    else:
        # Spark takes each group's first lines before the shuffle (its WindowGroupLimit).
        rank = F.row_number().over(Window.partitionBy("group").orderBy(*order))
        first = (
            bad.withColumn("rank", rank)
            .where(F.col("rank") <= MAX_REPORTED_PROBLEMS + 1)
            .orderBy("group", *order)
            .collect()
        )
    by_group: dict[Hashable, list[Problem]] = {}
    for row in first:
        by_group.setdefault(row.group, []).append(
            Problem(row.source_file, row.source_line, row.problem)
        )
    errors = {
        key: SourceDataError(
            source, found[:MAX_REPORTED_PROBLEMS], more=len(found) > MAX_REPORTED_PROBLEMS
        )
        for key, found in by_group.items()
    }
    if per is not None and errors:
        raise SourceDataErrors(source, errors)
    if errors:
        raise errors[None]


OFFSET_SUFFIX = r"(Z|[+-]\d{2}(:?\d{2})?)$"
"""How an ISO-8601 instant must end: with its offset from UTC."""


def instant(text: Column) -> Column:
    """An ISO-8601 text that states its offset, as the instant it names (a timestamp,
    compared and stored in UTC); null when the text has no offset or names no instant."""
    return F.when(text.rlike(OFFSET_SUFFIX), text.try_cast("timestamp"))


def json_problem(text: Column, variant: Column) -> Column:
    """Why a line is not JSON a row can be taken from, given `variant` =
    `try_parse_json(text)`; null when it parses. A field given twice is named: `from_json`
    would keep its last value without a word, and which one the sender meant is anyone's
    guess."""
    keys = F.json_object_keys(text)
    repeated = F.get(F.filter(keys, lambda key, i: F.array_position(keys, key) != i + 1), 0)
    return (
        F.when(variant.isNotNull(), F.lit(None).cast("string"))
        .when(repeated.isNotNull(), F.concat(F.lit("field '"), repeated, F.lit("' is given twice")))
        .when(
            keys.isNotNull(),
            F.lit("a nested object gives one of its fields twice (or the line is over 16 MiB)"),
        )
        .otherwise(F.lit("malformed JSON"))
    )


def json_kind(record: Column, field: str) -> Column:
    """The JSON type of a top-level field of a VARIANT object (`STRING`, `OBJECT`, ...;
    `VOID` for null; null when the field is absent)."""
    return F.schema_of_variant(F.try_variant_get(record, f"$.{field}", "variant"))


_KIND_NAMES = {"STRING": "text", "OBJECT": "a JSON object"}


def wrong_kind(record: Column, field: str, expected: str) -> Column:
    """ "field 'x' is OBJECT, not text" when a top-level field of a VARIANT object is given
    (not null) with a JSON type other than `expected` (`STRING` or `OBJECT`); null
    otherwise. A value of another type is refused, never kept as its JSON text."""
    return wrong_kind_of(json_kind(record, field), field, expected)


def wrong_kind_of(kind: Column, field: str, expected: str) -> Column:
    """`wrong_kind`, given the field's `json_kind`."""
    return F.when(
        kind.isNotNull() & (kind != "VOID") & ~kind.startswith(expected),
        F.concat(
            F.lit(f"field '{field}' is "),
            F.regexp_extract(kind, r"^[A-Z]+", 0),
            F.lit(f", not {_KIND_NAMES[expected]}"),
        ),
    )


def json_text(record: Column, field: str) -> Column:
    """A top-level field of a VARIANT object as text."""
    return F.try_variant_get(record, f"$.{field}", "string")
