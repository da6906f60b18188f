"""Event batches: `LANDING_ROOT/events/<batch_id>.jsonl` (the batch id is the file's stem),
one event per line:

- `event_id`: text, optional (missing or null: the event's key is derived, see below);
- `event_timestamp`, `ingestion_time`: ISO-8601 with an offset from UTC;
- `user_id`: text;
- `payload`: a JSON object;
- `op`: `upsert` (the default) or `delete`.

Spark's executors read the file (`source_files.read_lines`) and parse and validate every
line with Spark's own functions (`_typed`). A rejected line is named by file, line and
field, and nothing of the batch is staged. Each field has its JSON type: a number where
text is due, or a payload that is not an object, is refused, never coerced. A line that
names one field twice is refused as well.

Canonical payload: the payload parsed as a Spark VARIANT and written back as JSON
(`to_json(parse_json(...))`), computed in this one place, by Spark, whatever the engine.
That form is compact, orders every object's keys (at every depth) and writes each number
in one way (`2.50` and `2.5` alike), so two spellings of one payload are one text;
`tests/assets/warehouse/test_canonical_payload.py` pins it, so a Spark upgrade that
changed it (and so re-keyed events) fails the suite.

Event key, for an event without `event_id`: the SHA-256 (hex) of the JSON object
`{"user_id": ..., "event_timestamp": ..., "payload": ...}` whose values are the user id,
the event time in UTC as `YYYY-MM-DDTHH:MM:SS.ffffffZ` and the canonical payload, each as
a JSON string. JSON escapes every quote and backslash inside a string, so no content can
imitate the boundary between two fields.

Version order (`content_digest`): among versions of one event, the larger
`event_timestamp` wins, then the larger `ingestion_time`, then the larger content digest,
the SHA-256 of the JSON object `{"op": ..., "payload": ...}` (canonical payload), then
the columns the digest leaves out (`staging_merge.VERSION_ORDER`), so the order is total
and the same wherever the versions meet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from assets.source_files import (
    LINE_FACTS,
    SourceDataError,
    checked_facts,
    empty_files,
    instant,
    json_problem,
    read_lines,
    refusals_by,
    wrong_kind_of,
)
from resources.landing import FileStat, Fingerprint, LandingZone

EVENTS_FOLDER = "events"
OPS = ("upsert", "delete")
TEXT_FIELDS = ("event_timestamp", "ingestion_time", "user_id")
"""Required text fields; `event_id` and `op` are optional text, `payload` an object."""
EVENT_COLUMNS = (
    "event_id",
    "user_id",
    "event_timestamp",
    "ingestion_time",
    "payload",
    "is_deleted",
    "event_date",
    "batch_id",
    "key_derived",
    "content_digest",
)
"""What a staged event holds (plus `WHERE`)."""
WHERE = ("source_file", "source_line")
"""Where a line comes from."""
UTC_MICROS = "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'"


def batch_file(batch_id: str) -> str:
    return f"{EVENTS_FOLDER}/{batch_id}.jsonl"


@dataclass(frozen=True)
class ParsedBatch:
    """Every valid line of a batch as a typed event (copies included) with `source_file`
    and `source_line`, plus the file's fingerprint."""

    frame: DataFrame
    sources: list[Fingerprint]
    lines_read: int


@dataclass(frozen=True)
class ParsedBatches:
    """A run's batches parsed in one pass."""

    batches: dict[str, ParsedBatch | SourceDataError]
    """Each batch's events, or the error that refuses it."""
    events: DataFrame | None
    """The events of every batch that parsed, `ParsedBatch.frame` of each together (None
    when none did)."""


FIELDS = (*TEXT_FIELDS, "event_id", "op")
INSTANTS = ("event_timestamp", "ingestion_time")
TOP_LEVEL = "struct<" + ", ".join(f"{f} variant" for f in (*FIELDS, "payload")) + ">"
"""An event's top-level fields, each as a VARIANT (null when absent, VOID when null)."""


def _fields(fields: Column) -> list[Column]:
    """Each top-level field's JSON type (`<field>_kind`) and text (`<field>_text`), and
    the payload (`payload_v`) and its canonical JSON (`payload`), from the line's
    `TOP_LEVEL` fields: looked up in the line once, then read by the checks and the
    event's columns alike. A payload is told to be an object by its canonical JSON,
    which the event keeps anyway; its whole type is taken only for the message of a
    payload that is not one. (Looked up in every check that needed them, they cost 1M
    lines 27 s to stage, against 21 s; looked up once per field, with every payload's
    type taken, 16.5 s against 14.5 s, medians of five runs side by side.)"""
    payload = fields.getField("payload")
    return [
        *(F.schema_of_variant(fields.getField(f)).alias(f"{f}_kind") for f in FIELDS),
        *(F.try_variant_get(fields.getField(f), "$", "string").alias(f"{f}_text") for f in FIELDS),
        payload.alias("payload_v"),
        F.to_json(payload).alias("payload"),
    ]


def _problem(record: Column) -> Column:
    """Why a line (with its `_fields` and `<instant>_at` columns) is refused; null when
    it is an event."""
    check = (
        F.when(F.col("read_problem").isNotNull(), F.col("read_problem"))
        .when(F.col("text").isNull(), F.lit("file holds no event"))
        .when(record.isNull(), json_problem(F.col("text"), record))
        # A line that is no object has no fields: asked only then (a line's whole schema
        # costs 1M lines 1.3 s), before its first field is called missing.
        .when(
            F.col(f"{TEXT_FIELDS[0]}_kind").isNull()
            & ~F.schema_of_variant(record).startswith("OBJECT"),
            F.lit("line is not a JSON object"),
        )
    )
    for field in TEXT_FIELDS:
        kind = F.col(f"{field}_kind")
        check = check.when(
            kind.isNull() | (kind == "VOID") | (F.trim(F.col(f"{field}_text")) == ""),
            F.lit(f"missing required field '{field}'"),
        )
    for field in FIELDS:
        wrong = wrong_kind_of(F.col(f"{field}_kind"), field, "STRING")
        check = check.when(wrong.isNotNull(), wrong)
    check = check.when((F.trim(F.col("event_id_text")) == ""), F.lit("field 'event_id' is empty"))
    for field in INSTANTS:
        check = check.when(
            F.col(f"{field}_at").isNull(),
            F.concat(
                F.lit(f"{field} '"),
                F.col(f"{field}_text"),
                F.lit("' is not ISO-8601 with an offset"),
            ),
        )
    payload = F.col("payload")
    return (
        check.when(
            payload.isNull() | (payload == "null"),
            F.lit("missing required field 'payload'"),
        )
        .when(
            ~payload.startswith("{"),
            F.concat(
                F.lit("field 'payload' is "),
                F.schema_of_variant("payload_v"),
                F.lit(", not a JSON object"),
            ),
        )
        .when(
            ~F.coalesce(F.col("op_text"), F.lit("upsert")).isin(*OPS),
            F.concat(F.lit("op '"), F.col("op_text"), F.lit(f"' is not one of {', '.join(OPS)}")),
        )
    )


def _typed(lines: DataFrame, batch_id: Column) -> DataFrame:
    """The lines of batches (`read_lines`), read: each line's `LINE_FACTS`, `problem`
    (null on an event) and `EVENT_COLUMNS` (the batch's id from `batch_id`), in one pass.
    Times are compared in UTC whatever the session's zone: `UTC_MICROS` formats in the
    session zone, so the session must run in UTC (ours do)."""
    rec = F.col("record")
    return (
        lines.withColumn("record", F.expr("try_parse_json(text)"))
        .withColumn("fields", F.try_variant_get(rec, "$", TOP_LEVEL))
        .select(*LINE_FACTS, "read_problem", "text", "record", *_fields(F.col("fields")))
        .withColumns({f"{f}_at": instant(F.col(f"{f}_text")) for f in INSTANTS})
        .select(
            *LINE_FACTS,
            _problem(rec).alias("problem"),
            F.col("event_id_text").alias("given_id"),
            F.col("user_id_text").alias("user_id"),
            F.col("event_timestamp_at").alias("event_timestamp"),
            F.col("ingestion_time_at").alias("ingestion_time"),
            "payload",
            F.coalesce(F.col("op_text"), F.lit("upsert")).alias("op"),
        )
        .select(
            *LINE_FACTS,
            "problem",
            F.coalesce(
                "given_id",
                event_key(F.col("user_id"), F.col("event_timestamp"), F.col("payload")),
            ).alias("event_id"),
            "user_id",
            "event_timestamp",
            "ingestion_time",
            "payload",
            (F.col("op") == "delete").alias("is_deleted"),
            F.to_date("event_timestamp").alias("event_date"),
            batch_id.alias("batch_id"),
            F.col("given_id").isNull().alias("key_derived"),
            content_digest(F.col("op"), F.col("payload")).alias("content_digest"),
        )
    )


def event_key(user_id: Column, event_timestamp: Column, payload: Column) -> Column:
    """SHA-256 hex of the event's identifying columns (see the module's encoding)."""
    identity = F.to_json(
        F.struct(
            user_id.alias("user_id"),
            F.date_format(event_timestamp, UTC_MICROS).alias("event_timestamp"),
            payload.alias("payload"),
        )
    )
    return F.sha2(identity, 256)


def content_digest(op: Column, payload: Column) -> Column:
    return F.sha2(F.to_json(F.struct(op.alias("op"), payload.alias("payload"))), 256)


def parse_batch(
    spark: SparkSession, landing: LandingZone, batch_id: str, stat: FileStat
) -> ParsedBatch:
    """Parse and validate one batch file (`parse_batches` of it alone); raises
    SourceDataError naming every bad line it found (up to a limit)."""
    parsed = parse_batches(spark, landing, {batch_id: stat}).batches[batch_id]
    if isinstance(parsed, SourceDataError):
        raise parsed
    return parsed


def parse_batches(
    spark: SparkSession, landing: LandingZone, files: Mapping[str, FileStat]
) -> ParsedBatches:
    """The batches of `files` (each batch's file, by batch id) read, parsed and checked in
    one Spark pass (a few jobs for them all, not a few per batch), then split by batch:
    each batch's events, or the error that refuses it (every bad line found, up to a
    limit), worded as for that batch alone; and every parsed batch's events together, for
    work done once for them all. The lines are read, parsed, validated and
    typed in one pass, kept as a local checkpoint: the facts and the events are then read
    from it, and later jobs never read the files again. A pass that finds bad batches
    takes them out and reads the others again, so a bad batch never holds back the rest."""
    batch_of = {stat.path: batch_id for batch_id, stat in files.items()}
    outcome: dict[str, ParsedBatch | SourceDataError] = {
        batch_of[problem.file]: SourceDataError("events", [problem])
        for problem in empty_files(list(files.values()))
    }
    batch_ids = F.create_map(*(F.lit(part) for pair in batch_of.items() for part in pair))
    events = None
    while remaining := [batch_id for batch_id in files if batch_id not in outcome]:
        listed = [files[batch_id] for batch_id in remaining]
        try:
            lines = read_lines(spark, landing, listed)
            typed = _typed(lines, batch_ids[F.col("source_file")]).localCheckpoint()
            # Per batch, so each bad batch's first lines are named, as in a pass of its own.
            facts = checked_facts("events", typed, F.col("problem"), listed, per=F.col("batch_id"))
        except SourceDataError as error:
            outcome.update(refusals_by(error, remaining, batch_of.get))
            continue
        events = typed.where(F.col("source_line").isNotNull()).select(*EVENT_COLUMNS, *WHERE)
        fingerprints = {source.path: source for source in facts.fingerprints}
        for batch_id in remaining:
            path = files[batch_id].path
            outcome[batch_id] = ParsedBatch(
                events.where(F.col("batch_id") == batch_id),
                [fingerprints[path]],
                facts.lines_by_file.get(path, 0),
            )
    return ParsedBatches(outcome, events)
