"""What every materialization records, in the Delta commit and in Dagster's metadata.

The same facts land in both places on purpose: the commit metadata travels with the data
(a restore or an audit can read it from the table's history alone), and the Dagster
metadata makes them visible in the UI and lets the restore job find a partition's version.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg

from assets.columns import column_description
from resources.lakehouse import CommitResult, Lakehouse
from resources.lakehouse.port import TableFacts, normalize_metrics
from resources.lakehouse.predicates import Predicate, eq
from resources.landing import Fingerprint, sources_digest

SOURCE_DIGEST = "source_digest"
DELTA_VERSION = "delta_version"
TABLE_NAME = "table_name"
SKIPPED = "skipped"
PARTITION_SLICE = "partition_slice"


def partition_slice(column: str, value: dt.date | str) -> dict[str, Any]:
    """Metadata of a partition that is exactly the table's rows where `column = value`
    (what its write replaces): `restore_table` restores such a partition alone."""
    kind = "date" if isinstance(value, dt.date) else "string"
    text = value.isoformat() if isinstance(value, dt.date) else value
    return {PARTITION_SLICE: dg.MetadataValue.json({"column": column, "type": kind, "value": text})}


def slice_predicate(metadata: Mapping[str, Any]) -> Predicate | None:
    """The rows a materialization's partition is, from its `partition_slice` metadata
    (None: the partition is not a slice of its table)."""
    entry = metadata.get(PARTITION_SLICE)
    if entry is None:
        return None
    spec = entry.value
    value = dt.date.fromisoformat(spec["value"]) if spec["type"] == "date" else spec["value"]
    return eq(spec["column"], value)


def commit_metadata(
    context: dg.AssetExecutionContext | dg.OpExecutionContext,
    *,
    partition_key: str | None,
    sources: Sequence[Fingerprint] = (),
    **facts: Any,
) -> dict[str, Any]:
    """Commit metadata for a Delta write made by this run."""
    metadata: dict[str, Any] = {
        "dagster_run_id": context.run.run_id,
        "partition_key": partition_key,
    }
    if isinstance(context, dg.AssetExecutionContext):
        metadata["asset_key"] = context.asset_key.to_user_string()
    if sources:
        metadata[SOURCE_DIGEST] = sources_digest(sources)
        metadata["source_files"] = len(sources)
    metadata.update(facts)
    return metadata


def standard_table_metadata(
    lakehouse: Lakehouse, table: str, *, partition_rows: Predicate | None = None
) -> dict[str, Any]:
    """Dagster's own table metadata (`dagster/...`), which its catalog, asset page and
    partition views show, read from the Delta log alone (no data file is read).

    `partition_rows`: the rows the materialized partition is, when it is a slice of the
    table; their count is `dagster/partition_row_count`."""
    return _standard_metadata(
        lakehouse.uri(table), table, lakehouse.table_facts(table, where=partition_rows)
    )


def _standard_metadata(uri: str, table: str, facts: TableFacts | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"dagster/table_name": table, "dagster/uri": uri}
    if facts is None:
        return metadata
    metadata["dagster/column_schema"] = dg.TableSchema(
        columns=[
            dg.TableColumn(
                column.name,
                column.type,
                description=column.comment or column_description(table, column.name),
                constraints=dg.TableColumnConstraints(nullable=column.nullable),
            )
            for column in facts.columns
        ]
    )
    if facts.rows is not None:
        metadata["dagster/row_count"] = dg.MetadataValue.int(facts.rows)
    if facts.selected_rows is not None:
        metadata["dagster/partition_row_count"] = dg.MetadataValue.int(facts.selected_rows)
    return metadata


def _summary(
    table: str,
    *,
    operation: str,
    metrics: Mapping[str, int],
    partition_key: str | None,
    source_files: int,
    digest: str | None,
    outcome: str,
) -> dg.MetadataValue:
    """What changed and why, in two lines of markdown."""
    where = f"partition `{partition_key}` of " if partition_key else ""
    changed = ", ".join(
        f"{metrics.get(name, 0):,} {label}"
        for name, label in (
            ("rows_inserted", "inserted"),
            ("rows_updated", "updated"),
            ("rows_deleted", "deleted"),
        )
    )
    marked = metrics.get("files_marked", 0)
    if marked:
        changed += f" ({marked:,} file(s) kept, their replaced rows marked deleted)"
    why = f"from {source_files} source file(s), digest `{digest[:12]}`" if digest else ""
    return dg.MetadataValue.md(
        f"**{operation}** on {where}`{table}`: {outcome}.  \nRows {changed}. {why}".rstrip()
    )


def _table_metadata(
    lakehouse: Lakehouse,
    table: str,
    *,
    operation: str,
    metrics: Mapping[str, int],
    partition_key: str | None,
    sources: Sequence[Fingerprint],
    extra: Mapping[str, Any] | None,
    fresh_as_of: int | None = None,
) -> tuple[dict[str, Any], TableFacts | None]:
    """The metadata both kinds of materialization record, and the log facts it was read
    from (one read of the log; `fresh_as_of`: the version written, see `table_facts`)."""
    uri = lakehouse.uri(table)
    facts = lakehouse.table_facts(
        table, where=slice_predicate(extra or {}), fresh_as_of=fresh_as_of
    )
    metadata: dict[str, Any] = {
        TABLE_NAME: table,
        "table_uri": dg.MetadataValue.path(uri),
        "delta_operation": operation,
        "partition": partition_key or "",
        **{name: dg.MetadataValue.int(value) for name, value in metrics.items()},
        **_standard_metadata(uri, table, facts),
    }
    if sources:
        metadata[SOURCE_DIGEST] = sources_digest(sources)
        metadata["source_files"] = dg.MetadataValue.int(len(sources))
    return metadata, facts


def materialization_metadata(
    lakehouse: Lakehouse,
    result: CommitResult,
    *,
    partition_key: str | None,
    sources: Sequence[Fingerprint] = (),
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Dagster metadata for a materialization that wrote `result`."""
    metadata, _ = _table_metadata(
        lakehouse,
        result.table,
        operation=result.operation,
        metrics=result.metrics,
        partition_key=partition_key,
        sources=sources,
        extra=extra,
        fresh_as_of=result.version,
    )
    metadata[DELTA_VERSION] = dg.MetadataValue.int(result.version)
    metadata["summary"] = _summary(
        result.table,
        operation=result.operation,
        metrics=result.metrics,
        partition_key=partition_key,
        source_files=len(sources),
        digest=metadata.get(SOURCE_DIGEST),
        outcome=f"committed version {result.version}",
    )
    for name, url in lakehouse.spark.ui_urls().items():
        metadata[name] = dg.MetadataValue.url(url)
    metadata.update(extra or {})
    return metadata


def skipped_metadata(
    lakehouse: Lakehouse,
    table: str,
    *,
    reason: str,
    partition_key: str | None,
    sources: Sequence[Fingerprint] = (),
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Dagster metadata for a materialization that committed nothing, and says why.

    It records the table's current version as `table_version`, never as `delta_version`:
    no commit of this run exists to restore to the version before of."""
    metrics = normalize_metrics({}, "NONE")
    metadata, facts = _table_metadata(
        lakehouse,
        table,
        operation="NONE",
        metrics=metrics,
        partition_key=partition_key,
        sources=sources,
        extra=extra,
    )
    metadata["table_version"] = dg.MetadataValue.int(facts.version if facts else 0)
    metadata[SKIPPED] = reason
    metadata["summary"] = _summary(
        table,
        operation="NONE",
        metrics=metrics,
        partition_key=partition_key,
        source_files=len(sources),
        digest=metadata.get(SOURCE_DIGEST),
        outcome=f"nothing committed ({reason})",
    )
    metadata.update(extra or {})
    return metadata


def latest_materialization(
    instance: dg.DagsterInstance, asset_key: dg.AssetKey, partition_key: str
) -> dg.EventLogRecord | None:
    """The partition's latest materialization record, if any."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=[partition_key]), limit=1
    ).records
    return records[0] if records else None


def recorded_source_digest(record: dg.EventLogRecord | None) -> str | None:
    """The source digest a materialization recorded: None without a materialization, ""
    for one that recorded none (it read no files: any file is news)."""
    if record is None or record.asset_materialization is None:
        return None
    value = record.asset_materialization.metadata.get(SOURCE_DIGEST)
    return str(value.value) if value is not None else ""
