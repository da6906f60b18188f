"""Visits source files: `LANDING_ROOT/visits/date=YYYY-MM-DD/*.jsonl`, one visit per line.

Spark's executors read, number, parse and validate the lines (`read_lines`), so every
rejected row is named by file and line, and a day of any size never passes through the
Dagster process: it lists the files and collects one fact row per file.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import Column, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from assets.overwriting.calendar import DAY_FOLDER_PATTERN, day_folder, day_of_file
from assets.source_files import (
    Problem,
    SourceDataError,
    checked_facts,
    empty_files,
    instant,
    json_problem,
    read_lines,
    refusals_by,
    wrong_kind,
)
from resources.lakehouse import Lakehouse
from resources.lakehouse.frames import StagedParts
from resources.landing import FileStat, Fingerprint, LandingZone

if TYPE_CHECKING:
    from resources.lakehouse.port import Data

VISIT_FIELDS = T.StructType(
    [
        T.StructField("visit_id", T.StringType()),
        T.StructField("user_id", T.StringType()),
        T.StructField("event_time", T.StringType()),
        T.StructField("page", T.StringType()),
        # An object of any shape: kept as its JSON text.
        T.StructField("context", T.StringType()),
        T.StructField("_corrupt_record", T.StringType()),
    ]
)
REQUIRED_FIELDS = ("visit_id", "user_id", "event_time", "page")
VISIT_COLUMNS = (
    "visit_id",
    "user_id",
    "event_time",
    "event_date",
    "page",
    "context",
    "source_file",
    "source_line",
)


@dataclass(frozen=True)
class ParsedVisits:
    """Valid visits, one row per visit_id and day, plus what parsing saw."""

    parts: StagedParts
    """By `event_date`, in the form the lakehouse writes from (`Lakehouse.staged_parts`)."""
    sources: list[Fingerprint]
    lines_by_file: dict[str, int]


def _misplaced(files: Sequence[FileStat]) -> list[Problem]:
    return [
        Problem(stat.path, None, "not under a visits/date=YYYY-MM-DD/ folder")
        for stat in files
        if day_of_file(stat.path) is None
    ]


def _problem(record: Column, variant: Column, event_time: Column) -> Column:
    unparsed = json_problem(F.col("text"), variant)
    check = (
        F.when(F.col("read_problem").isNotNull(), F.col("read_problem"))
        .when(F.col("text").isNull(), F.lit("file holds no visit, only blank lines"))
        .when(unparsed.isNotNull(), unparsed)
        .when(record.isNull() | record["_corrupt_record"].isNotNull(), F.lit("malformed JSON"))
    )
    for name, expected in (*((n, "STRING") for n in REQUIRED_FIELDS), ("context", "OBJECT")):
        wrong = wrong_kind(variant, name, expected)
        check = check.when(wrong.isNotNull(), wrong)
    for name in REQUIRED_FIELDS:
        check = check.when(
            record[name].isNull() | (F.trim(record[name]) == ""),
            F.lit(f"missing required field '{name}'"),
        )
    return check.when(
        event_time.isNull(),
        F.concat(
            F.lit("event_time '"),
            record["event_time"],
            F.lit("' is not an ISO-8601 instant with its offset from UTC"),
        ),
    ).when(
        F.to_date(event_time) != F.col("folder_day"),
        F.concat(
            F.lit("event_time '"),
            record["event_time"],
            F.lit("' is not on the folder's day "),
            F.col("folder_day").cast("string"),
        ),
    )


def parse_visits(
    spark: SparkSession,
    landing: LandingZone,
    lakehouse: Lakehouse,
    files: Sequence[FileStat],
) -> ParsedVisits:
    """Parse and validate landed visit files; raises SourceDataError naming every bad
    file and line it found (up to a limit) before anything can be written. The lines are
    read once, for two actions whatever the number of days: the files' facts, then the
    visits staged in the engine's form.

    A visit delivered twice (a duplicated file, a re-sent line) is kept once per event
    day: the copy from the first file and line in path order, so the choice never depends
    on timing, and each day keeps what parsing it on its own would keep.
    """
    problems = _misplaced(files) or empty_files(files)
    if problems:
        raise SourceDataError("visits", problems)
    record = F.from_json(
        "text",
        VISIT_FIELDS,
        {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record"},
    )
    folder_day = F.to_date(F.regexp_extract("source_file", DAY_FOLDER_PATTERN, 1))
    parsed = (
        read_lines(spark, landing, files)
        .withColumn("folder_day", folder_day)
        .withColumn("record", record)
        .withColumn("variant", F.expr("try_parse_json(text)"))
        .withColumn("event_ts", instant(F.col("record.event_time")))
        .withColumn("problem", _problem(F.col("record"), F.col("variant"), F.col("event_ts")))
        .drop("text", "variant")
        .cache()
    )
    try:
        facts = checked_facts("visits", parsed, F.col("problem"), files, per=F.col("folder_day"))
        first_copy = Window.partitionBy("event_date", "visit_id").orderBy(
            "source_file", "source_line"
        )
        visits = (
            parsed.select(
                F.col("record.visit_id").alias("visit_id"),
                F.col("record.user_id").alias("user_id"),
                F.col("event_ts").alias("event_time"),
                F.to_date("event_ts").alias("event_date"),
                F.col("record.page").alias("page"),
                F.col("record.context").alias("context"),
                "source_file",
                "source_line",
            )
            .withColumn("copy", F.row_number().over(first_copy))
            .where(F.col("copy") == 1)
            .drop("copy")
        )
        parts = lakehouse.staged_parts(visits, "event_date", order=["event_time", "visit_id"])
    finally:
        parsed.unpersist()
    return ParsedVisits(parts, facts.fingerprints, facts.lines_by_file)


@dataclass(frozen=True)
class VisitDay:
    """One day's valid visits out of a range parsed in one pass, with what parsing saw."""

    rows: Data
    """In the form the lakehouse writes from (`Lakehouse.staged_parts`)."""
    sources: list[Fingerprint]
    lines_read: int
    duplicates_dropped: int

    def facts(self) -> dict[str, int]:
        """What a materialization reports about its input."""
        return {"lines_read": self.lines_read, "duplicates_dropped": self.duplicates_dropped}


@dataclass(frozen=True)
class VisitDays:
    """A range of days parsed in one pass."""

    days: dict[dt.date, VisitDay | SourceDataError]
    """Each day's visits, or the error that refuses it."""
    rows: Data | None
    """The visits of every day that parsed (None when none did)."""


def parse_visit_days(
    spark: SparkSession, landing: LandingZone, lakehouse: Lakehouse, days: Sequence[dt.date]
) -> VisitDays:
    """Every visits file of `days` read, parsed and checked in one Spark pass (a few jobs
    for the whole range, not a few per day), then split by day: each day's visits, or the
    error that refuses it, worded as a run of that day alone would word it.

    A pass that finds bad files names every day they refuse (each day's first problems,
    `checked_facts` per day); those days are taken out and the pass made again over the
    others, so bad days never hold back the rest, and a year of them costs two passes,
    not one per few days."""
    # The day folders listed together: on an object store one request per 1,000 files
    # of the range, not one per day.
    by_folder = landing.list_folders([day_folder(day) for day in days], suffix=".jsonl")
    files = {day: by_folder[day_folder(day)] for day in days}
    refused: dict[dt.date, SourceDataError] = {}
    while True:
        remaining = [day for day in days if day not in refused]
        listed = [stat for day in remaining for stat in files[day]]
        try:
            parsed = parse_visits(spark, landing, lakehouse, listed)
            break
        except SourceDataError as error:
            refused.update(refusals_by(error, remaining, day_of_file))
        if len(refused) == len(days):
            return VisitDays(dict(refused), None)
    parts = parsed.parts
    sources_by_day: dict[dt.date | None, list[Fingerprint]] = {}
    for source in parsed.sources:
        sources_by_day.setdefault(day_of_file(source.path), []).append(source)
    outcome: dict[dt.date, VisitDay | SourceDataError] = dict(refused)
    for day in remaining:
        sources = sources_by_day.get(day, [])
        rows, kept = parts.part(day)
        read = sum(parsed.lines_by_file.get(f.path, 0) for f in sources)
        outcome[day] = VisitDay(rows, sources, read, read - kept)
    return VisitDays(outcome, parts.data)
