"""Enriched run directories: `LANDING_ROOT/enriched/run=YYYY-MM-DD-HH-MM-SS/`, written by
an upstream enrichment job that finishes a directory by writing its `_SUCCESS` file.

Every other file directly in the directory (not hidden, not `_`-prefixed, not in a
sub-folder) holds JSON lines, one event each: a JSON object with

- `event_type`: text naming the event's kind, `[a-z][a-z0-9_]*` (at most 64 characters);
  it names the event's stage and warehouse tables;
- `event_id`: non-empty text, unique per event;
- the event's own fields, typed by the warehouse table definition of its type.

Spark's executors read and validate the lines; a rejected line is named by file and line,
and nothing of the batch is staged. A staged event keeps its canonical JSON (keys ordered,
numbers in one spelling: a Spark VARIANT written back), so copies of one event delivered
twice are one text.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from assets.source_files import (
    Problem,
    SourceDataError,
    checked_facts,
    empty_files,
    json_kind,
    json_problem,
    json_text,
    read_lines,
    wrong_kind,
)
from resources.landing import FileStat, Fingerprint, LandingZone

ENRICHED_FOLDER = "enriched"
RUN_PREFIX = "run="
SUCCESS = "_SUCCESS"
RUN_ID = re.compile(r"^\d{4}-\d{2}-\d{2}-\d{2}-\d{2}-\d{2}$")
EVENT_TYPE = r"^[a-z][a-z0-9_]{0,63}$"
STAGED_COLUMNS = ("run_id", "event_type", "event_id", "event", "source_file", "source_line")


def run_id_of(folder_name: str) -> str | None:
    """`run=2024-05-01-10-00-00` -> `2024-05-01-10-00-00`; None for any other name (or a
    date that does not exist)."""
    run_id = folder_name.removeprefix(RUN_PREFIX)
    if run_id == folder_name or not RUN_ID.match(run_id):
        return None
    try:
        dt.datetime.strptime(run_id, "%Y-%m-%d-%H-%M-%S")
    except ValueError:
        return None
    return run_id


def run_folder(run_id: str) -> str:
    return f"{ENRICHED_FOLDER}/{RUN_PREFIX}{run_id}"


def run_files(landing: LandingZone, run_id: str) -> tuple[list[FileStat], list[str]]:
    """The event files of a run directory, and what the layout leaves out (files in
    sub-folders)."""
    folder = run_folder(run_id)
    files: list[FileStat] = []
    ignored: list[FileStat] = []
    for stat in landing.list(folder):
        (ignored if "/" in stat.path.removeprefix(f"{folder}/") else files).append(stat)
    return files, [stat.path for stat in ignored]


@dataclass(frozen=True)
class ParsedRuns:
    """Every event of the runs, one row per line (`STAGED_COLUMNS`), checkpointed, and
    the fingerprints of the files read."""

    frame: DataFrame
    sources: list[Fingerprint]


def _problem(record: Column) -> Column:
    check = (
        F.when(F.col("read_problem").isNotNull(), F.col("read_problem"))
        .when(F.col("text").isNull(), F.lit("file holds no event"))
        .when(record.isNull(), json_problem(F.col("text"), record))
        .when(~F.schema_of_variant(record).startswith("OBJECT"), F.lit("line is not a JSON object"))
    )
    for field in ("event_type", "event_id"):
        kind = json_kind(record, field)
        check = check.when(
            kind.isNull() | (kind == "VOID") | (F.trim(json_text(record, field)) == ""),
            F.lit(f"missing required field '{field}'"),
        )
        wrong = wrong_kind(record, field, "STRING")
        check = check.when(wrong.isNotNull(), wrong)
    return check.when(
        ~json_text(record, "event_type").rlike(EVENT_TYPE),
        F.concat(
            F.lit("event_type '"),
            json_text(record, "event_type"),
            F.lit("' is not a name of lower-case letters, digits and '_'"),
        ),
    )


def parse_runs(
    spark: SparkSession, landing: LandingZone, files_by_run: Mapping[str, Sequence[FileStat]]
) -> ParsedRuns:
    """Read and validate the event files of the runs in one Spark job; raises
    SourceDataError naming the first bad lines (by file and line)."""
    files = [stat for stats in files_by_run.values() for stat in stats]
    problems = empty_files(files) + [
        Problem(run_folder(run_id), None, "run directory holds no event file")
        for run_id, stats in files_by_run.items()
        if not stats
    ]
    if problems:
        raise SourceDataError("enriched", problems)
    record = F.expr("try_parse_json(text)")
    lines = (
        read_lines(spark, landing, files)
        .withColumn("record", record)
        .withColumn("problem", _problem(F.col("record")))
        .cache()
    )
    try:
        facts = checked_facts("enriched", lines, F.col("problem"), files)
        # `enriched/run=<id>/<file>`: the run id is the folder's.
        folder = F.element_at(F.split("source_file", "/"), 2)
        events = lines.select(
            F.substring(folder, len(RUN_PREFIX) + 1, 64).alias("run_id"),
            json_text(F.col("record"), "event_type").alias("event_type"),
            json_text(F.col("record"), "event_id").alias("event_id"),
            F.to_json(F.col("record")).alias("event"),
            "source_file",
            "source_line",
        ).localCheckpoint()
    finally:
        lines.unpersist()
    return ParsedRuns(events, facts.fingerprints)
