"""The two daily change-file formats of the Updates family, parsed in Spark.

- `devices_cdc/YYYY-MM-DD.csv`: `;`-delimited, header `type;full_name;version;is_deleted`
  (`is_deleted` may be absent: false). Identity: (`type`, `version`).
- `device_catalog/YYYY-MM-DD.jsonl`: `id`, `brand_name`, `full_name`, `processor_brand`
  (strings; `id` and `full_name` required). Identity: `id`.

A key changed twice in one file is folded to its last line, so a MERGE never sees two
source rows for one target row and never picks one by chance.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from assets.source_files import (
    LINE_FACTS,
    Problem,
    SourceDataError,
    checked_facts,
    json_problem,
    read_lines,
    wrong_kind,
)
from resources.landing import FileStat, Fingerprint, LandingFileError, LandingZone

DEVICE_COLUMNS = ("type", "full_name", "version")
CDC_HEADERS = ("type;full_name;version", "type;full_name;version;is_deleted")
CATALOG_FIELDS = T.StructType(
    [
        T.StructField("id", T.StringType()),
        T.StructField("brand_name", T.StringType()),
        T.StructField("full_name", T.StringType()),
        T.StructField("processor_brand", T.StringType()),
        T.StructField("_corrupt_record", T.StringType()),
    ]
)
CATALOG_COLUMNS = ("id", "brand_name", "full_name", "processor_brand")


@dataclass(frozen=True)
class ChangeSet:
    """One day's changes, one row per key (the file's last line for that key)."""

    frame: DataFrame
    source: Fingerprint
    rows_read: int
    keys: int

    @property
    def folded(self) -> int:
        """Lines superseded by a later line for the same key in the same file."""
        return self.rows_read - self.keys

    def facts(self) -> dict[str, int]:
        return {"rows_read": self.rows_read, "duplicate_keys_folded": self.folded}


def devices_cdc_path(day: dt.date) -> str:
    return f"devices_cdc/{day.isoformat()}.csv"


def device_catalog_path(day: dt.date) -> str:
    return f"device_catalog/{day.isoformat()}.jsonl"


def _landed(landing: LandingZone, path: str, source: str) -> FileStat:
    try:
        stat = landing.stat(path)
    except LandingFileError as error:
        raise SourceDataError(source, [Problem(path, None, error.problem)]) from error
    if stat is None:
        raise SourceDataError(source, [Problem(path, None, "change file has not landed")])
    return stat


def _cdc_header(landing: LandingZone, stat: FileStat) -> str:
    """The file's first line, stripped: its header, or "" when it has none."""
    first = landing.head(stat.path).split(b"\n", 1)[0]
    return first.decode("utf-8", errors="replace").strip().lstrip("\ufeff")


def _last_line_per_key(rows: DataFrame, keys: Sequence[str]) -> DataFrame:
    last = Window.partitionBy(*keys).orderBy(F.col("source_line").desc())
    return rows.withColumn("_rank", F.row_number().over(last)).where("_rank = 1").drop("_rank")


def _required(value: Column, name: str) -> Column:
    return F.when(value.isNull() | (F.trim(value) == ""), F.lit(f"missing required field '{name}'"))


def _finish(
    source: str,
    rows: DataFrame,
    columns: Sequence[str],
    keys: Sequence[str],
    stat: FileStat,
) -> ChangeSet:
    """Refuse the file if any line has a `problem`, else fold it to one row per key."""
    rows = rows.cache()
    try:
        facts = checked_facts(source, rows, F.col("problem"), [stat])
        changes = rows.where(F.col("source_line").isNotNull()).select("source_line", *columns)
        frame = (
            _last_line_per_key(changes, keys).drop("source_line").orderBy(*keys).localCheckpoint()
        )
        return ChangeSet(frame, facts.fingerprints[0], facts.lines, frame.count())
    finally:
        rows.unpersist()


def parse_device_changes(spark: SparkSession, landing: LandingZone, day: dt.date) -> ChangeSet:
    """The day's devices CDC file; an empty file (or a header alone) is no change."""
    stat = _landed(landing, devices_cdc_path(day), "devices_cdc")
    header = _cdc_header(landing, stat)
    if header and header not in CDC_HEADERS:
        hint = " (is the file ';'-delimited?)" if ";" not in header else ""
        raise SourceDataError(
            "devices_cdc",
            [Problem(stat.path, 1, f"header {header!r} is not {' or '.join(CDC_HEADERS)}{hint}")],
        )
    columns = header.split(";") if header else list(DEVICE_COLUMNS)
    lines = read_lines(spark, landing, [stat])
    if header:
        # The header row keeps carrying the file's facts, like a blank file's row: no line
        # number, no text, so it is neither a change nor a problem.
        header_row = F.col("source_line") == 1
        lines = lines.select(
            *(F.when(~header_row, F.col(c)).alias(c) for c in ("source_line", "text")),
            *(c for c in lines.columns if c not in ("source_line", "text")),
        )
    fields = F.split("text", ";")
    # `get`: a short line yields nulls (and its problem) instead of failing the task.
    values = {name: F.trim(F.get(fields, i)) for i, name in enumerate(columns)}
    is_deleted = F.lower(values.get("is_deleted", F.lit("false")))
    problem = _read_problem().when(
        # A header line again in the body (files concatenated by hand) is no device.
        F.lower(F.trim(F.col("text"))).isin(*CDC_HEADERS),
        F.lit("the header line again: a header belongs on line 1 only"),
    )
    problem = problem.when(
        F.size(fields) != len(columns),
        F.concat(
            F.lit(f"expected {len(columns)} ';'-separated fields, found "),
            F.size(fields).cast("string"),
        ),
    )
    for name in DEVICE_COLUMNS:
        problem = problem.when(
            values[name].isNull() | (values[name] == ""), F.lit(f"missing required field '{name}'")
        )
    problem = problem.when(
        ~is_deleted.isin("true", "false", ""),
        F.concat(F.lit("is_deleted must be true or false, not '"), is_deleted, F.lit("'")),
    )
    rows = lines.select(
        *LINE_FACTS,
        *(values[name].alias(name) for name in DEVICE_COLUMNS),
        (is_deleted == "true").alias("is_deleted"),
        problem.alias("problem"),
    )
    return _finish("devices_cdc", rows, (*DEVICE_COLUMNS, "is_deleted"), ("type", "version"), stat)


def parse_catalog_changes(spark: SparkSession, landing: LandingZone, day: dt.date) -> ChangeSet:
    """The day's device catalog changes; an empty file is no change."""
    stat = _landed(landing, device_catalog_path(day), "device_catalog")
    record = F.from_json(
        "text",
        CATALOG_FIELDS,
        {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record"},
    )
    lines = (
        read_lines(spark, landing, [stat])
        .withColumn("record", record)
        .withColumn("variant", F.expr("try_parse_json(text)"))
    )
    unparsed = json_problem(F.col("text"), F.col("variant"))
    problem = (
        _read_problem()
        .when(unparsed.isNotNull(), unparsed)
        .when(
            F.col("record").isNull() | F.col("record._corrupt_record").isNotNull(),
            F.lit("malformed JSON"),
        )
    )
    for name in CATALOG_COLUMNS:
        # Every field is text: an object or a number is refused, never kept as its JSON.
        wrong = wrong_kind(F.col("variant"), name, "STRING")
        problem = problem.when(wrong.isNotNull(), wrong)
    problem = problem.otherwise(
        F.coalesce(
            _required(F.col("record.id"), "id"),
            _required(F.col("record.full_name"), "full_name"),
        )
    )
    rows = lines.select(
        *LINE_FACTS,
        *(F.col(f"record.{name}").alias(name) for name in CATALOG_COLUMNS),
        problem.alias("problem"),
    )
    return _finish("device_catalog", rows, CATALOG_COLUMNS, ("id",), stat)


def _read_problem() -> Column:
    """What `read_lines` found wrong with a line; a blank file's placeholder row (no text)
    is no change, and no problem."""
    return F.when(F.col("read_problem").isNotNull(), F.col("read_problem")).when(
        F.col("text").isNull(), F.lit(None).cast("string")
    )
