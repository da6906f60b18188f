"""Payments source files: `LANDING_ROOT/payments/date=YYYY-MM-DD/*.jsonl`, one payment per
line: `idempotency_key`, `account_id`, `amount` (a decimal string such as "12.50"),
`currency` (ISO 4217 code), `created_at` (ISO-8601 with an offset).

Values are parsed to their types on Spark's executors: `amount` to a decimal (never a
float; more than 6 decimal places is refused rather than rounded), `created_at` to an
instant in UTC. Every payment also gets `payload_sha256`, a digest of its typed values, so
"12.5" and "12.50", or one instant written with two offsets, digest alike: comparing a
replay with what is stored reads two columns, not whole rows.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from assets.source_files import (
    SourceDataError,
    checked_facts,
    empty_files,
    instant,
    json_problem,
    read_lines,
    wrong_kind,
)
from resources.landing import FileStat, Fingerprint, LandingZone

KEY = "idempotency_key"
PAYLOAD_COLUMNS = ("account_id", "amount", "currency", "created_at")
"""What a payment says; a replay must repeat it (but for columns set as mutable)."""
AMOUNT_TYPE = T.DecimalType(38, 6)
DIGEST = "payload_sha256"
_FIELDS = T.StructType(
    [T.StructField(name, T.StringType()) for name in (KEY, *PAYLOAD_COLUMNS)]
    + [T.StructField("_corrupt_record", T.StringType())]
)
_AMOUNT = r"^[+-]?\d{1,32}(\.\d{1,6})?$"
_CURRENCY = r"^[A-Z]{3}$"


def day_folder(day: dt.date) -> str:
    return f"payments/date={day.isoformat()}"


def folder_day(source_file: Column) -> Column:
    """The day a payment belongs to: its file's `date=YYYY-MM-DD` folder."""
    return F.to_date(F.regexp_extract(source_file, r"date=(\d{4}-\d{2}-\d{2})/[^/]*$", 1))


@dataclass(frozen=True)
class ParsedPayments:
    """Every valid line of the files as a typed payment (copies included), with
    `source_file`, `source_line` and `payment_date` (its file's day), plus the files'
    fingerprints and non-blank lines."""

    frame: DataFrame
    sources: list[Fingerprint]
    lines_read: int
    lines_by_file: dict[str, int]


def shown(column: str, alias: str) -> Column:
    """A typed payment value (of DataFrame `alias`) as text for people: amounts without
    trailing zeros, instants in UTC."""
    value = F.col(f"{alias}.{column}")
    if column == "amount":
        return F.regexp_replace(value.cast("string"), r"\.?0+$", "")
    if column == "created_at":
        return F.date_format(value, "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'")
    return value


def payload_digest() -> Column:
    """SHA-256 of the typed payload. `to_json` of a struct escapes every string and names
    every field, so no content can imitate a field boundary."""
    typed = F.struct(
        F.col("account_id"),
        F.col("amount").cast("string").alias("amount"),
        F.col("currency"),
        F.unix_micros("created_at").alias("created_at"),
    )
    return F.unhex(F.sha2(F.to_json(typed), 256))


def _problem(record: Column, variant: Column, amount: Column, created_at: Column) -> Column:
    unparsed = json_problem(F.col("text"), variant)
    check = (
        F.when(F.col("read_problem").isNotNull(), F.col("read_problem"))
        .when(F.col("text").isNull(), F.lit("file is empty"))
        .when(unparsed.isNotNull(), unparsed)
        .when(record.isNull() | record["_corrupt_record"].isNotNull(), F.lit("malformed JSON"))
    )
    for name in (KEY, *PAYLOAD_COLUMNS):
        # Every field is text (the amount a decimal string): a number or an object is
        # refused, never kept as its JSON text.
        wrong = wrong_kind(variant, name, "STRING")
        check = check.when(wrong.isNotNull(), wrong)
    for name in (KEY, *PAYLOAD_COLUMNS):
        check = check.when(
            record[name].isNull() | (F.trim(record[name]) == ""),
            F.lit(f"missing required field '{name}'"),
        )
    return (
        check.when(
            ~record["amount"].rlike(_AMOUNT) | amount.isNull(),
            F.concat(
                F.lit("amount '"),
                record["amount"],
                F.lit("' is not a decimal with at most 6 decimal places"),
            ),
        )
        .when(
            ~record["currency"].rlike(_CURRENCY),
            F.concat(
                F.lit("currency '"), record["currency"], F.lit("' is not a 3-letter ISO code")
            ),
        )
        .when(
            created_at.isNull(),
            F.concat(
                F.lit("created_at '"),
                record["created_at"],
                F.lit("' is not ISO-8601 with an offset"),
            ),
        )
    )


def parse_payments(
    spark: SparkSession, landing: LandingZone, files: Sequence[FileStat]
) -> ParsedPayments:
    """Parse and validate payment files; raises SourceDataError naming every bad file and
    line it found (up to a limit). The frame is checkpointed: later jobs never re-read the
    files."""
    problems = empty_files(files)
    if problems:
        raise SourceDataError("payments", problems)
    record = F.from_json(
        "text", _FIELDS, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record"}
    )
    parsed = (
        read_lines(spark, landing, files)
        .withColumn("record", record)
        .withColumn("variant", F.expr("try_parse_json(text)"))
        .withColumn("amount", F.expr(f"try_cast(record.amount AS {AMOUNT_TYPE.simpleString()})"))
        .withColumn("created_at", instant(F.col("record.created_at")))
        .withColumn(
            "problem",
            _problem(F.col("record"), F.col("variant"), F.col("amount"), F.col("created_at")),
        )
        .drop("text", "variant")
        .cache()
    )
    try:
        facts = checked_facts(
            "payments", parsed, F.col("problem"), files, per=folder_day(F.col("source_file"))
        )
        payments = (
            parsed.where(F.col("source_line").isNotNull())
            .select(
                F.col(f"record.{KEY}").alias(KEY),
                F.col("record.account_id").alias("account_id"),
                "amount",
                F.col("record.currency").alias("currency"),
                "created_at",
                "source_file",
                "source_line",
                folder_day(F.col("source_file")).alias("payment_date"),
            )
            .withColumn(DIGEST, payload_digest())
            .localCheckpoint()
        )
    finally:
        parsed.unpersist()
    return ParsedPayments(payments, facts.fingerprints, facts.lines, facts.lines_by_file)
