"""Landed source files read by Spark, as numbered lines, and bad input as clear errors.

Spark's executors read the files: they hash each one whole and read its lines, numbered
from 1 per file, in blocks spread over the cores, and neither the bytes nor the rows pass
through the Dagster process. That process only lists the files (size and mtime, no
content) and collects what is small: one fact row per file and block, and the first
rejected lines, named by file and line. Nothing is written while any line is rejected.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeVar
from urllib.parse import unquote

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from assets.run_policy import Refusal
from resources.landing import FileStat, Fingerprint, LandingZone

MAX_REPORTED_PROBLEMS = 10
K = TypeVar("K", bound=Hashable)
MAX_FILE_BYTES = 2**31 - 1
"""Spark hashes a file's bytes held in one array (`spark.sql.sources.binaryFile.maxLength`),
so executors need memory for the largest file: split bigger inputs into files."""
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


class SourceDataError(Refusal, ValueError):
    """Source files that cannot be ingested; nothing was written. The data's own failure
    (`assets.run_policy.Refusal`): a step that raises it fails at once, and its work is
    never asked for again."""

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


def refusals_by(
    error: SourceDataError, groups: Collection[K], group_of: Callable[[str], K | None]
) -> dict[K, SourceDataError]:
    """`error`, from one pass over several groups of files (a range's days, a run's
    batches), as the error of each of `groups` it names; `group_of` gives a file's group.
    Raises `error` itself when one of its problems belongs to none of them (the whole
    pass fails with it). Only a list of bad lines is ever cut short, and that one comes
    group by group (SourceDataErrors); the other errors name every file."""
    found: dict[K, SourceDataError] | None
    if isinstance(error, SourceDataErrors):
        found = error.of(groups)
    else:
        by_group: dict[K | None, list[Problem]] = {}
        for problem in error.problems:
            by_group.setdefault(group_of(problem.file), []).append(problem)
        found = {
            group: SourceDataError(error.source, by_group[group])
            for group in groups
            if group in by_group
        }
        if error.more or len(found) < len(by_group):
            found = None
    if not found:
        raise error
    return found


def empty_files(files: Sequence[FileStat]) -> list[Problem]:
    """0-byte files, which Spark skips without a word: a source that must not be empty
    names them."""
    return [Problem(stat.path, None, "file is empty") for stat in files if stat.size == 0]


def _hadoop_path(landing: LandingZone, path: str) -> str:
    """The absolute path Spark is given, with Hadoop's glob characters escaped so a
    file named `a[1].jsonl` is read as itself."""
    return _GLOB_CHARACTERS.sub(r"\\\1", landing.spark_path(path))


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
      counted) and `text` (without line break; a leading UTF-8 byte-order mark is dropped
      by Hadoop's line reader);
    - `read_problem`: "not valid UTF-8" on a line that holds bytes UTF-8 cannot decode
      (its `text` shows them as U+FFFD), else null;
    - `source_size`, `source_mtime` and `source_sha256` of the line's file, so per-file
      facts come from the rows themselves (`checked_facts`).

    A file without any non-blank line keeps one row, with a null `text` and `source_line`,
    so its facts are never lost; empty (0-byte) files have no row at all (Spark skips
    them). Callers decide what an empty file means.

    Spark's text source splits each file into blocks that several tasks read. The lines
    are read once and kept as read (a local checkpoint); one job then counts every
    block's lines, the blocks of a file numbered on from the lines of the ones before
    it, and hashes each file whole (`binaryFile`, one task per file, beside the counting
    tasks). Reading a 1M-line file whole in one task and splitting it there, then
    spreading the lines over the cores with a shuffle, cost 4.0 to 4.6 s; reading,
    keeping, counting and numbering them in blocks costs 2.4 to 3.0 s.

    The hash and the lines are two reads of the file. Once both are done, each file is
    listed again: a file whose size or mtime differ between the two reads and that
    listing is refused as changed while it was read (nothing of it is staged), so the
    hash is always that of the lines staged.
    """
    problems = _unreadable_by_spark(files)
    if problems:
        raise SourceDataError("landed", problems)
    readable = [stat for stat in files if stat.size > 0]
    if not readable:
        return spark.createDataFrame([], _LINES_SCHEMA)
    paths = [_hadoop_path(landing, stat.path) for stat in readable]
    prefix = landing.spark_root
    try:
        # Planned where they are used: classic Spark at `load`, Spark Connect at the
        # checkpoint and the counting job (each plan looks at every file it is given, on
        # an object store a request or more each, so none is planned only to be checked).
        # Either way a file gone since the listing is named here.
        whole = spark.read.format("binaryFile").load(paths)
        lines = _kept_lines(spark.read.option("lineSep", "\n").text(paths))
        blocks = _file_blocks(spark, landing, whole, lines, prefix)
    except AnalysisException as error:
        gone = [stat for stat in readable if not landing.exists(stat.path)]
        if error.getCondition() != "PATH_NOT_FOUND" or not gone:
            raise
        raise SourceDataError(
            "landed", [Problem(stat.path, None, "gone since it was listed") for stat in gone]
        ) from error
    numbered = lines.join(F.broadcast(blocks.frame), ["spark_path", "block"]).select(
        "source_file",
        (F.col("lines_before") + F.col("row_id") - F.col("first_row_id") + 1)
        .cast("int")
        .alias("source_line"),
        "text",
        F.when(~F.col("valid_utf8"), F.lit("not valid UTF-8")).alias("read_problem"),
        "source_size",
        "source_mtime",
        "source_sha256",
    )
    kept = numbered.where(F.col("text").rlike(r"\S"))
    return kept.unionByName(blocks.without_lines) if blocks.without_lines else kept


def _kept_lines(text: DataFrame) -> DataFrame:
    """The lines of Spark's text read, each with its block and id, kept as read (a local
    checkpoint, made now)."""
    # Hadoop renders a local path as a URI: `_metadata.file_path` is percent-encoded, where
    # `binaryFile`'s `path` is not.
    return (
        text.select(
            F.col("_metadata.file_path").alias("spark_path"),
            F.col("_metadata.file_block_start").alias("block"),
            F.monotonically_increasing_id().alias("row_id"),
            F.col("_metadata.file_size").alias("source_size"),
            F.col("_metadata.file_modification_time").alias("source_mtime"),
            F.unix_millis("_metadata.file_modification_time").alias("mtime_ms"),
            "value",
            F.is_valid_utf8("value").alias("valid_utf8"),
        )
        .select(
            *_BLOCK_KEY,
            "row_id",
            "source_mtime",
            # Bytes UTF-8 cannot decode are shown as U+FFFD: a line is text wherever it goes
            # (Spark Connect's Arrow batches refuse anything else).
            _without_carriage_return(
                F.when(F.col("valid_utf8"), F.col("value")).otherwise(F.make_valid_utf8("value"))
            ).alias("text"),
            "valid_utf8",
        )
        # Kept as read: the blocks Spark splits a file into, and the ids of their lines,
        # depend on the cores it has when it plans a read (executors come and go on a
        # cluster), so the lines are numbered from the one read that counted them.
        .localCheckpoint()
    )


def _without_carriage_return(line: Column) -> Column:
    """The line without the "\r" of a "\r\n" ending. Lines end at "\n" only (Hadoop's
    default would end them at a lone "\r" too, which is a character of its line here).
    The "\r" is cut off where a line ends with one: a regular expression on every line
    cost 1M lines 0.5 s more."""
    return F.when(
        F.endswith(line, F.lit("\r")), F.substring(line, F.lit(1), F.char_length(line) - 1)
    ).otherwise(line)


_LINES_SCHEMA = (
    "source_file string, source_line int, text string, read_problem string, "
    "source_size long, source_mtime timestamp, source_sha256 string"
)
_BLOCK_KEY = ("spark_path", "block", "source_size", "mtime_ms")
"""A block of a file as the text source read it: where it starts, in the file of that
path, size and mtime (milliseconds)."""


class WholeFile(NamedTuple):
    """A file as it was hashed."""

    path: str
    size: int
    mtime_ms: int
    sha256: str


class Block(NamedTuple):
    """A block of a file's lines as the text source read it."""

    path: str
    spark_path: str
    start: int
    size: int
    mtime_ms: int
    lines: int
    """Lines, blank ones included."""
    first_row_id: int
    """`monotonically_increasing_id` of its first line (a task's ids count on)."""
    non_blank: int


@dataclass(frozen=True)
class Numbering:
    first_lines: list[tuple[str, int, str, int, int, str]]
    """Per block (Spark's path, where it starts): landing path, the number of its first
    line less 1 (the lines of the file's earlier blocks), its first line's row id, and the
    file's hash."""
    without_lines: list[WholeFile]
    """Files that hold no non-blank line."""


def number_blocks(
    hashed: Sequence[WholeFile],
    blocks: Sequence[Block],
    listed_after: Mapping[str, tuple[int, int] | None],
) -> Numbering:
    """Where each block's lines start in its file, its blocks taken in file order.

    `listed_after` holds each file's size and mtime (milliseconds) as listed once both
    reads were done (None: gone). Raises SourceDataError naming every file whose hash,
    blocks and that listing do not agree on one size and mtime: it changed while it was
    read. A hashed file without blocks was emptied or removed before its lines were
    listed; `checked_facts` names it."""
    by_path = {whole.path: whole for whole in hashed}
    blocks_of: dict[str, list[Block]] = {}
    for block in blocks:
        blocks_of.setdefault(block.path, []).append(block)
    first_lines, without_lines, problems = [], [], []
    for path, of_file in sorted(blocks_of.items()):
        whole = by_path.get(path)
        seen = {(block.size, block.mtime_ms) for block in of_file}
        if whole is None or seen != {(whole.size, whole.mtime_ms), listed_after.get(path)}:
            problems.append(Problem(path, None, "changed while it was read"))
            continue
        before = 0
        for block in sorted(of_file, key=lambda b: b.start):
            first_lines.append(
                (block.spark_path, block.start, path, before, block.first_row_id, whole.sha256)
            )
            before += block.lines
        if not any(block.non_blank for block in of_file):
            without_lines.append(whole)
    if problems:
        raise SourceDataError("landed", problems)
    return Numbering(first_lines, without_lines)


@dataclass(frozen=True)
class _Blocks:
    frame: DataFrame
    """`Numbering.first_lines` as a frame to join the lines with."""
    without_lines: DataFrame | None
    """The rows of the files without a non-blank line (see `read_lines`)."""


def _file_blocks(
    spark: SparkSession, landing: LandingZone, whole: DataFrame, lines: DataFrame, prefix: str
) -> _Blocks:
    """Every file's hash and every block's line count, in one job, and the files listed
    again once it is done (see `read_lines`)."""
    hashes = whole.select(
        F.lit(None).cast("string").alias("spark_path"),
        F.substring(F.col("path"), len(prefix) + 1, 2**31 - 1).alias("source_file"),
        F.lit(None).cast("long").alias("block"),
        F.col("length").alias("source_size"),
        F.unix_millis("modificationTime").alias("mtime_ms"),
        F.sha2(F.col("content"), 256).alias("source_sha256"),
        F.lit(None).cast("long").alias("lines"),
        F.lit(None).cast("long").alias("first_row_id"),
        F.lit(None).cast("long").alias("non_blank"),
    )
    counts = lines.groupBy(*_BLOCK_KEY).agg(
        F.lit(None).cast("string").alias("source_file"),
        F.lit(None).cast("string").alias("source_sha256"),
        F.count("*").alias("lines"),
        F.min("row_id").alias("first_row_id"),
        F.count_if(F.col("text").rlike(r"\S")).alias("non_blank"),
    )
    rows = hashes.unionByName(counts).collect()
    read = [row.source_file for row in rows if row.spark_path is None]
    step = landing.mtime_step_ms  # Spark's times, to the precision of the landing zone's

    def kept(ms: int) -> int:
        return ms - ms % step

    # Looked at again, side by side: the files a run read lie together (a range's day
    # folders), so an object store lists them rather than asking for each.
    again = landing.listed_each(read, adjacent=True)
    listed_after = {
        path: None if stat is None else (stat.size, kept(stat.mtime_ns // 1_000_000))
        for path, stat in zip(read, again, strict=True)
    }
    numbering = number_blocks(
        [
            WholeFile(row.source_file, row.source_size, kept(row.mtime_ms), row.source_sha256)
            for row in rows
            if row.spark_path is None
        ],
        [
            Block(
                unquote(row.spark_path)[len(prefix) :],
                row.spark_path,
                row.block,
                row.source_size,
                kept(row.mtime_ms),
                row.lines,
                row.first_row_id,
                row.non_blank,
            )
            for row in rows
            if row.spark_path is not None
        ],
        listed_after,
    )
    frame = spark.createDataFrame(
        numbering.first_lines,
        "spark_path string, block long, source_file string, lines_before long, "
        "first_row_id long, source_sha256 string",
    )
    if not numbering.without_lines:
        return _Blocks(frame, None)
    files = spark.createDataFrame(
        numbering.without_lines,
        "source_file string, source_size long, mtime_ms long, source_sha256 string",
    )
    return _Blocks(
        frame,
        files.select(
            "source_file",
            F.lit(None).cast("int").alias("source_line"),
            F.lit(None).cast("string").alias("text"),
            F.lit(None).cast("string").alias("read_problem"),
            "source_size",
            F.timestamp_millis("mtime_ms").alias("source_mtime"),
            "source_sha256",
        ),
    )


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


OFFSET_SUFFIX = r"(?s)^.*(Z|[+-]\d{2}(:?\d{2})?)$"
"""How an ISO-8601 instant must end: with its offset from UTC. Anchored at the start, so
the matcher tries one position, not every one: 2M instants take 0.14 s to check, not
0.57 s."""


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
