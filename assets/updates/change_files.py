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
    Problem,
    SourceDataError,
    decode_utf8,
    first_problems,
    numbered_lines,
)
from resources.landing import Fingerprint, LandingZone

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


def _text(landing: LandingZone, path: str, source: str) -> tuple[Fingerprint, str]:
    if not landing.exists(path):
        raise SourceDataError(source, [Problem(path, None, "change file has not landed")])
    landed = landing.read(path)
    text = decode_utf8(landed)
    if isinstance(text, Problem):
        raise SourceDataError(source, [text])
    return landed.fingerprint, text


def _last_line_per_key(rows: DataFrame, keys: Sequence[str]) -> DataFrame:
    last = Window.partitionBy(*keys).orderBy(F.col("source_line").desc())
    return rows.withColumn("_rank", F.row_number().over(last)).where("_rank = 1").drop("_rank")


def _required(value: Column, name: str) -> Column:
    return F.when(value.isNull() | (F.trim(value) == ""), F.lit(f"missing required field '{name}'"))


def _finish(rows: DataFrame, keys: Sequence[str], source: Fingerprint) -> ChangeSet:
    rows = rows.cache()
    try:
        rows_read = rows.count()
        frame = _last_line_per_key(rows, keys).orderBy(*keys).localCheckpoint()
        return ChangeSet(frame, source, rows_read, frame.count())
    finally:
        rows.unpersist()


def parse_device_changes(spark: SparkSession, landing: LandingZone, day: dt.date) -> ChangeSet:
    """The day's devices CDC file; an empty file (or a header alone) is no change."""
    path = devices_cdc_path(day)
    fingerprint, text = _text(landing, path, "devices_cdc")
    header, _, body = text.partition("\n")
    header = header.strip().lstrip("\ufeff")
    if header and header not in CDC_HEADERS:
        hint = " (is the file ';'-delimited?)" if ";" not in header else ""
        raise SourceDataError(
            "devices_cdc",
            [Problem(path, 1, f"header {header!r} is not {' or '.join(CDC_HEADERS)}{hint}")],
        )
    columns = header.split(";") if header else list(DEVICE_COLUMNS)
    lines = numbered_lines(
        spark.createDataFrame([(path, body)], "source_file string, content string")
    ).withColumn("source_line", F.col("source_line") + 1)  # after the header line
    fields = F.split("text", ";")
    problem = F.when(
        F.size(fields) != len(columns),
        F.concat(
            F.lit(f"expected {len(columns)} ';'-separated fields, found "),
            F.size(fields).cast("string"),
        ),
    )
    values = {name: F.trim(fields[i]) for i, name in enumerate(columns)}
    is_deleted = F.lower(values.get("is_deleted", F.lit("false")))
    for name in DEVICE_COLUMNS:
        problem = problem.when(
            values[name].isNull() | (values[name] == ""), F.lit(f"missing required field '{name}'")
        )
    problem = problem.when(
        ~is_deleted.isin("true", "false", ""),
        F.concat(F.lit("is_deleted must be true or false, not '"), is_deleted, F.lit("'")),
    )
    rows = lines.select(
        "source_file",
        "source_line",
        *(values[name].alias(name) for name in DEVICE_COLUMNS),
        (is_deleted == "true").alias("is_deleted"),
        problem.alias("problem"),
    )
    first_problems("devices_cdc", rows, F.col("problem"))
    return _finish(rows.drop("problem", "source_file"), ("type", "version"), fingerprint)


def parse_catalog_changes(spark: SparkSession, landing: LandingZone, day: dt.date) -> ChangeSet:
    """The day's device catalog changes; an empty file is no change."""
    path = device_catalog_path(day)
    fingerprint, text = _text(landing, path, "device_catalog")
    lines = numbered_lines(
        spark.createDataFrame([(path, text)], "source_file string, content string")
    )
    record = F.from_json(
        "text",
        CATALOG_FIELDS,
        {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record"},
    ).alias("record")
    parsed = lines.select("source_file", "source_line", record)
    problem = F.when(
        F.col("record").isNull() | F.col("record._corrupt_record").isNotNull(),
        F.lit("malformed JSON"),
    ).otherwise(_required(F.col("record.id"), "id"))
    problem = F.coalesce(problem, _required(F.col("record.full_name"), "full_name"))
    first_problems("device_catalog", parsed, problem)
    rows = parsed.select(
        "source_line", *(F.col(f"record.{name}").alias(name) for name in CATALOG_COLUMNS)
    )
    return _finish(rows, ("id",), fingerprint)
