"""Table maintenance jobs for every Delta table: restore to an earlier version, vacuum,
compact small files."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import dagster as dg
from pydantic import Field

from assets.immutable.proxy import SnapshotError, referenced_snapshots
from assets.materialization import (
    DELTA_VERSION,
    PARTITION_SLICE,
    SOURCE_DIGEST,
    TABLE_NAME,
    commit_metadata,
    latest_materialization,
    recorded_source_digest,
    slice_predicate,
)
from assets.run_policy import NO_RETRY_ON_REFUSAL
from assets.transactional_writer import mark_restored
from resources import Lakehouse
from resources.lakehouse.predicates import Predicate


class TableVersion(dg.Config):
    """Move the whole table to a version (Delta RESTORE)."""

    kind: Literal["table_version"] = "table_version"
    table: str = Field(
        description="The Delta table as materializations name it in `table_name`, e.g. "
        "`visits_daily` or `visits_weekly/week=2024-12-02`."
    )
    version: int = Field(
        description="The version to go back to: a `delta_version` from a materialization's "
        "metadata, or a version from the table's history."
    )


class UndoMaterialization(dg.Config):
    """Go back to the version just before an asset's latest committed materialization."""

    kind: Literal["undo_materialization"] = "undo_materialization"
    asset_key: str = Field(description="The asset, e.g. `visits_daily` or `device_catalog`.")
    partition: str = Field(
        default="",
        description="The partition, e.g. `2024-12-10`; empty for an unpartitioned asset. A "
        "partition that is a slice of its table (a day of `visits_daily`) moves alone.",
    )


class RestoreTableConfig(dg.Config):
    target: TableVersion | UndoMaterialization = Field(
        discriminator="kind",
        description="`table_version` (the whole table moves) or `undo_materialization` (a "
        "slice partition moves alone; otherwise the whole table moves and every partition "
        "it undid is reported, to be materialized again).",
    )


MATERIALIZATIONS_SEARCHED = 100


class RestoreRequestError(ValueError):
    """The restore request names nothing restorable."""


@dataclass(frozen=True)
class RestoreTarget:
    table: str
    version: int
    reason: str
    where: Predicate | None = None
    """The partition's rows, when only they are restored."""
    partition_slice: dg.JsonMetadataValue | None = None


def restore_target_version(table: str, written_version: int, *, what: str) -> RestoreTarget:
    """The version to go back to in order to undo the commit `written_version`."""
    if written_version <= 0:
        raise RestoreRequestError(
            f"{what} created table {table!r} (version {written_version}): there is no "
            "earlier version to restore"
        )
    return RestoreTarget(table, written_version - 1, f"undo {what} (version {written_version})")


def resolve_restore_target(
    config: RestoreTableConfig, instance: dg.DagsterInstance
) -> RestoreTarget:
    request = config.target
    if isinstance(request, TableVersion):
        return RestoreTarget(request.table, request.version, f"requested version {request.version}")
    what = f"materialization of {request.asset_key}" + (
        f" partition {request.partition}" if request.partition else ""
    )
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(
            asset_key=dg.AssetKey.from_user_string(request.asset_key),
            asset_partitions=[request.partition] if request.partition else None,
        ),
        limit=MATERIALIZATIONS_SEARCHED,
    ).records
    if not records:
        raise RestoreRequestError(f"no {what} is recorded in this Dagster instance")
    # A materialization that skipped its write (input already committed) changed nothing:
    # the one to undo is the latest that committed.
    committed = [
        r.asset_materialization.metadata
        for r in records
        if r.asset_materialization is not None and DELTA_VERSION in r.asset_materialization.metadata
    ]
    if not committed:
        raise RestoreRequestError(
            f"none of the latest {len(records)} {what}s recorded a Delta commit to undo"
        )
    metadata = committed[0]
    if TABLE_NAME not in metadata:
        raise RestoreRequestError(f"the latest {what} did not record its table")
    table = str(metadata[TABLE_NAME].value)
    target = restore_target_version(
        table, int(str(metadata[DELTA_VERSION].value)), what=f"latest {what}"
    )
    if request.partition:
        return replace(
            target,
            where=slice_predicate(metadata),
            partition_slice=_json_value(metadata.get(PARTITION_SLICE)),
        )
    return target


def _json_value(value: object) -> dg.JsonMetadataValue | None:
    return value if isinstance(value, dg.JsonMetadataValue) else None


def _undone_partitions(undone: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(asset key, partition key) of the commits a restore undid, as they recorded them."""
    return sorted(
        {
            (str(meta["asset_key"]), str(meta["partition_key"]))
            for meta in undone
            if meta.get("asset_key") and meta.get("partition_key")
        }
    )


@dg.op
def restore_delta_table(
    context: dg.OpExecutionContext, config: RestoreTableConfig, lakehouse: Lakehouse
) -> dg.Output[None]:
    """Restore a table, or one partition's rows, to an earlier version as a new commit;
    refuses, changing no table data, if that version's files were vacuumed."""
    target = resolve_restore_target(config, context.instance)
    undo = config.target if isinstance(config.target, UndoMaterialization) else None
    partition = undo.partition if undo else ""
    current = lakehouse.version(target.table) or 0
    undone = [
        entry.metadata
        for entry in lakehouse.history(target.table, limit=max(current - target.version, 1))
        if entry.version > target.version
    ]
    if target.where is not None:
        # Only this partition's rows move: only its commits are undone.
        undone = [meta for meta in undone if meta.get("partition_key") == partition]
    # Partitions whose transactional commits the restore undoes get a new input version
    # first, so that their next run writes again (a restore keeps app transactions).
    # Marked before the restore: a crash in between costs one needless rewrite, never a
    # skip.
    rewritable = mark_restored(
        lakehouse,
        target.table,
        undone=undone,
        run_id=context.run.run_id,
        note=f"{target.table} restored to version {target.version} by run {context.run.run_id}",
    )
    metadata = commit_metadata(context, partition_key=partition or None, restored_to=target.version)
    if target.where is None:
        result = lakehouse.restore(target.table, target.version, metadata=metadata)
        scope = "the whole table"
    else:
        result = lakehouse.restore_where(
            target.table, target.version, where=target.where, metadata=metadata
        )
        scope = f"partition {partition} ({target.where.render(lakehouse.dialect)})"
    moved = _undone_partitions(undone)
    context.log.info(
        f"restored {scope} of {target.table} to version {target.version} ({target.reason}) "
        f"as version {result.version}; partitions moved back: "
        f"{', '.join(f'{a} {p}' for a, p in moved) or 'none'}; partitions whose next run "
        f"writes again: {', '.join(rewritable) or 'none'}"
    )
    # Each moved partition is reported as materialized by the restore, at the restored
    # content's version, so Dagster shows that it changed (a restore of it undoes the
    # restore). A partition the user asked to restore keeps the source digest its files
    # had: file sensors leave it restored until its files change. One that moved only
    # because the whole table did records none and `needs_rerun`: a sensor (or the user)
    # brings it forward again.
    asked = {(undo.asset_key, undo.partition)} if undo else set(moved)
    for asset_key, partition_key in moved:
        key = dg.AssetKey.from_user_string(asset_key)
        intended = (asset_key, partition_key) in asked
        digest = (
            recorded_source_digest(latest_materialization(context.instance, key, partition_key))
            if intended
            else None
        )
        context.log_event(
            dg.AssetMaterialization(
                asset_key=key,
                partition=partition_key,
                description=(
                    f"restored to version {target.version} by restore_table"
                    + (
                        ""
                        if intended
                        else ", with the whole table: materialize it again to bring it forward"
                    )
                ),
                metadata={
                    TABLE_NAME: target.table,
                    DELTA_VERSION: result.version,
                    "restored_to_version": target.version,
                    "restore_scope": scope,
                    "needs_rerun": not intended,
                    **({SOURCE_DIGEST: digest} if digest else {}),
                    **(
                        {PARTITION_SLICE: target.partition_slice}
                        if target.partition_slice is not None
                        else {}
                    ),
                },
            )
        )
    return dg.Output(
        None,
        metadata={
            TABLE_NAME: target.table,
            "restored_to_version": target.version,
            DELTA_VERSION: result.version,
            "reason": target.reason,
            "restore_scope": scope,
            "partitions_moved": ", ".join(f"{a} {p}" for a, p in moved),
            "rewritten_by_next_run": ", ".join(rewritable),
        },
    )


@dg.job(
    tags=NO_RETRY_ON_REFUSAL,
    description="Roll a Delta table back to a version, or to just before a materialization "
    "(asset_key + partition). A partition that is a slice of its table (a day of "
    "visits_daily) moves alone; otherwise the whole table moves and every partition it "
    "moved is reported as restored, to be materialized again.",
)
def restore_table() -> None:
    restore_delta_table()


class VacuumConfig(dg.Config):
    table: str = Field(description="The Delta table to vacuum, e.g. `visits_daily`.")
    retention_hours: int = Field(
        default=168,
        description="Files replaced longer ago than this many whole hours are deleted; "
        "versions older than this can then no longer be restored.",
    )
    dry_run: bool = Field(
        default=False, description="List the files it would delete, and delete none."
    )


def _refuse_referenced_snapshot(lakehouse: Lakehouse, table: str, operation: str) -> None:
    """Write-once snapshots keep their files as written while the proxy references them."""
    if table in referenced_snapshots(lakehouse):
        raise SnapshotError(
            f"refused to {operation} {table!r}: it is a write-once snapshot the "
            "device_snapshot proxy references; its files change only when retention "
            "retires it"
        )


@dg.op
def vacuum_delta_table(
    context: dg.OpExecutionContext, config: VacuumConfig, lakehouse: Lakehouse
) -> dg.Output[None]:
    _refuse_referenced_snapshot(lakehouse, config.table, "vacuum")
    removed = lakehouse.vacuum(
        config.table, retention_hours=config.retention_hours, dry_run=config.dry_run
    )
    verb = "would remove" if config.dry_run else "removed"
    context.log.info(f"vacuum {config.table}: {verb} {len(removed)} files")
    return dg.Output(
        None,
        metadata={
            TABLE_NAME: config.table,
            "files_removed": len(removed),
            "dry_run": config.dry_run,
        },
    )


@dg.job(
    tags=NO_RETRY_ON_REFUSAL,
    description="Delete data files of a Delta table that no recent version references.",
)
def vacuum_table() -> None:
    vacuum_delta_table()


class CompactConfig(dg.Config):
    tables: list[str] = Field(
        description="Delta tables to compact, e.g. `[visits_daily]`; a table not created yet "
        "is skipped."
    )


@dg.op
def compact_delta_tables(
    context: dg.OpExecutionContext, config: CompactConfig, lakehouse: Lakehouse
) -> dg.Output[None]:
    compacted: dict[str, dict[str, int]] = {}
    for table in config.tables:
        if not lakehouse.exists(table):
            context.log.info(f"compact {table}: no such table yet, skipped")
            continue
        _refuse_referenced_snapshot(lakehouse, table, "compact")
        result = lakehouse.compact(table, metadata=commit_metadata(context, partition_key=None))
        compacted[table] = {
            DELTA_VERSION: result.version,
            "files_removed": result.metrics.get("files_removed", 0),
            "files_added": result.metrics.get("files_added", 0),
        }
        context.log.info(f"compact {table}: {compacted[table]}")
    return dg.Output(None, metadata={"compacted": compacted})


@dg.job(
    tags=NO_RETRY_ON_REFUSAL,
    description="Bin-pack the small files of Delta tables into files of their target size "
    "(OPTIMIZE compaction). Rows are unchanged; a writer racing it retries its commit.",
)
def compact_tables() -> None:
    compact_delta_tables()
