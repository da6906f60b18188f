"""The loader: PROCESSED runs from the stage area into the warehouse, then LOADED.

Warehouse tables are `warehouse/<event_type>`: the fields of the type's table definition
(a Spark DDL column list, e.g. `event_id string, amount decimal(18,2)`), plus `run_id`,
partitioned by run. A run is loaded type by type, each table's partitions of the batch's
runs replaced in one commit (replaceWhere on the run ids), so loading a run again, after
a crash or on purpose, never duplicates a row. Fields the definition does not name are
not loaded.

A run holding an event type without a definition is refused whole (nothing of it is
loaded, the type is named); so is a run whose events do not fit their definitions (file,
line and field named). The other runs of the batch load.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from assets.source_files import SourceDataError, first_problems, instant, json_kind, json_text
from assets.warehouse.manifest import load_manifest as manifest
from assets.warehouse.manifest.load_manifest import LOADED, NEW
from assets.warehouse.manifest.shredder import Step, no_step, stage_table
from resources import Lakehouse
from resources.lakehouse.predicates import is_in

WAREHOUSE = "warehouse"
DEFAULT_EVENT_TABLES = {
    "page_view": "event_id string, user_id string, event_timestamp timestamp, "
    "page_url string, referrer string",
    "link_click": "event_id string, user_id string, event_timestamp timestamp, target_url string",
    "purchase": "event_id string, user_id string, event_timestamp timestamp, "
    "order_id string, amount decimal(18,2), currency string",
}


def warehouse_table(event_type: str) -> str:
    return f"{WAREHOUSE}/{event_type}"


@dataclass
class Loaded:
    loaded: list[str] = field(default_factory=list)
    rows_by_type: dict[str, int] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    """Run id -> why nothing of it was loaded."""
    to_skip: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    not_processed: list[str] = field(default_factory=list)


def definition(spark: SparkSession, event_type: str, ddl: str) -> T.StructType:
    try:
        schema = spark.createDataFrame([], ddl).schema
    except Exception as error:
        raise ValueError(
            f"table definition of {event_type!r} is not a DDL column list: {ddl!r}"
        ) from error
    if "event_id" not in schema.names or "run_id" in schema.names:
        raise ValueError(
            f"table definition of {event_type!r} must name event_id and must not name run_id "
            f"(the loader adds it): {ddl!r}"
        )
    return schema


def _typed(record: Column, name: str, kind: T.DataType) -> Column:
    """The field as `kind`: text from a JSON string only, a timestamp from ISO-8601 text
    with an offset, a number from a JSON number or its text (`"12.50"`); null otherwise."""
    text = json_text(record, name)
    if isinstance(kind, T.StringType):
        return F.when(json_kind(record, name) == "STRING", text)
    if isinstance(kind, T.TimestampType):
        return instant(text)
    return F.try_variant_get(record, f"$.{name}", kind.simpleString())


def typed_events(staged: DataFrame, schema: T.StructType) -> tuple[DataFrame, dict[str, str]]:
    """Stage rows as rows of the definition, and per run whose events do not fit it, the
    first bad values named by file, line and field (a timestamp must be ISO-8601 with an
    offset)."""
    # Parsed once per event; every field is read from the parsed record.
    parsed = staged.select(
        "run_id", "source_file", "source_line", F.parse_json("event").alias("record")
    )
    record = F.col("record")
    typed = parsed.select(
        "*", *(_typed(record, f.name, f.dataType).alias(f.name) for f in schema.fields)
    )
    problem = F.lit(None).cast("string")
    for f in reversed(schema.fields):
        kind = json_kind(record, f.name)
        given = kind.isNotNull() & (kind != "VOID")
        problem = F.when(
            given & F.col(f.name).isNull(),
            F.concat(
                F.lit(f"field '{f.name}' is "), kind, F.lit(f", not {f.dataType.simpleString()}")
            ),
        ).otherwise(problem)
    checked = typed.withColumn("problem", problem).localCheckpoint()
    bad_runs = [
        row.run_id
        for row in checked.where(F.col("problem").isNotNull()).select("run_id").distinct().collect()
    ]
    refused = {}
    for run_id in bad_runs:
        try:
            first_problems("enriched", checked.where(F.col("run_id") == run_id), F.col("problem"))
        except SourceDataError as error:
            refused[run_id] = str(error)
    return checked.select(*schema.names, "run_id"), refused


def load(
    spark: SparkSession,
    lakehouse: Lakehouse,
    run_ids: Sequence[str],
    event_tables: Mapping[str, str],
    *,
    by: str,
    metadata: dict,
    on_step: Step = no_step,
) -> Loaded:
    """Load the PROCESSED runs among `run_ids` and move them to LOADED (see the module)."""
    rows = manifest.read(lakehouse, run_ids)
    result = Loaded()
    ready = []
    for run_id in run_ids:
        row = rows.get(run_id)
        if row is not None and row.to_skip:
            result.to_skip.append(run_id)
        elif row is None or row.state == NEW:
            result.not_processed.append(run_id)
        elif row.state == LOADED:
            result.already.append(run_id)
        else:
            unknown = sorted(set(row.event_types) - set(event_tables))
            if unknown:
                result.refused[run_id] = (
                    f"event type {', '.join(map(repr, unknown))} has no table definition "
                    f"(known: {', '.join(sorted(event_tables))})"
                )
            else:
                ready.append(row)
    frames: dict[str, DataFrame] = {}
    for event_type in sorted({t for row in ready for t in row.event_types}):
        runs = sorted(row.run_id for row in ready if event_type in row.event_types)
        staged = lakehouse.read(stage_table(event_type), where=is_in("run_id", runs))
        schema = definition(spark, event_type, event_tables[event_type])
        frames[event_type], refused = typed_events(staged, schema)
        result.refused.update(refused)
    loadable = sorted(row.run_id for row in ready if row.run_id not in result.refused)
    for event_type, frame in frames.items():
        runs = [r for r in loadable if event_type in rows[r].event_types]
        if not runs:
            continue
        written = lakehouse.overwrite(
            warehouse_table(event_type),
            frame.where(F.col("run_id").isin(runs)),
            where=is_in("run_id", runs),
            partition_by=["run_id"],
            metadata={**metadata, "event_type": event_type},
        )
        result.rows_by_type[event_type] = written.metrics.get("rows_inserted", 0)
        on_step(f"loaded {event_type}")
    if loadable:
        manifest.mark_loaded(lakehouse, loadable, by=by, metadata=metadata)
    on_step("loaded")
    result.loaded = loadable
    return result
