"""Table maintenance jobs for every Delta table: restore to an earlier version, vacuum,
compact small files."""

from dataclasses import dataclass

import dagster as dg

from assets.materialization import DELTA_VERSION, TABLE_NAME, commit_metadata
from resources import Lakehouse


class RestoreTableConfig(dg.Config):
    """Either `table` + `version`, or `asset_key` (+ `partition`): the table is restored
    to the version just before that materialization's commit."""

    table: str = ""
    version: int | None = None
    asset_key: str = ""
    partition: str = ""


class RestoreRequestError(ValueError):
    """The restore request names nothing restorable."""


@dataclass(frozen=True)
class RestoreTarget:
    table: str
    version: int
    reason: str


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
    if config.version is not None:
        if not config.table:
            raise RestoreRequestError("a version to restore needs the table it belongs to")
        return RestoreTarget(config.table, config.version, f"requested version {config.version}")
    if not config.asset_key:
        raise RestoreRequestError("give either table + version, or asset_key (+ partition)")
    what = f"materialization of {config.asset_key}" + (
        f" partition {config.partition}" if config.partition else ""
    )
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(
            asset_key=dg.AssetKey.from_user_string(config.asset_key),
            asset_partitions=[config.partition] if config.partition else None,
        ),
        limit=1,
    ).records
    if not records:
        raise RestoreRequestError(f"no {what} is recorded in this Dagster instance")
    metadata = records[0].asset_materialization.metadata
    if TABLE_NAME not in metadata or DELTA_VERSION not in metadata:
        raise RestoreRequestError(f"the latest {what} did not record a table and Delta version")
    table = metadata[TABLE_NAME].value
    if config.table and config.table != table:
        raise RestoreRequestError(f"the latest {what} wrote {table!r}, not {config.table!r}")
    return restore_target_version(table, int(metadata[DELTA_VERSION].value), what=f"latest {what}")


@dg.op
def restore_delta_table(
    context: dg.OpExecutionContext, config: RestoreTableConfig, lakehouse: Lakehouse
) -> dg.Output[None]:
    """Restore a table to an earlier version as a new commit; refuses, changing nothing,
    if that version's files were vacuumed."""
    target = resolve_restore_target(config, context.instance)
    result = lakehouse.restore(
        target.table,
        target.version,
        metadata=commit_metadata(
            context, partition_key=config.partition or None, restored_to=target.version
        ),
    )
    context.log.info(
        f"restored {target.table} to version {target.version} ({target.reason}) "
        f"as version {result.version}"
    )
    if config.asset_key:
        context.log_event(
            dg.AssetObservation(
                asset_key=dg.AssetKey.from_user_string(config.asset_key),
                partition=config.partition or None,
                metadata={
                    TABLE_NAME: target.table,
                    "restored_to_version": target.version,
                    DELTA_VERSION: result.version,
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
        },
    )


@dg.job(
    description="Roll a Delta table back to a version, or to just before a materialization "
    "(asset_key + partition). The whole table moves: later commits of other partitions "
    "are undone too."
)
def restore_table() -> None:
    restore_delta_table()


class VacuumConfig(dg.Config):
    table: str
    retention_hours: float = 168.0
    """Files replaced longer ago than this are deleted; versions older than this can then
    no longer be restored."""
    dry_run: bool = False


@dg.op
def vacuum_delta_table(
    context: dg.OpExecutionContext, config: VacuumConfig, lakehouse: Lakehouse
) -> dg.Output[None]:
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


@dg.job(description="Delete data files of a Delta table that no recent version references.")
def vacuum_table() -> None:
    vacuum_delta_table()


class CompactConfig(dg.Config):
    tables: list[str]
    """Delta tables to compact; a table not created yet is skipped."""


@dg.op
def compact_delta_tables(
    context: dg.OpExecutionContext, config: CompactConfig, lakehouse: Lakehouse
) -> dg.Output[None]:
    compacted: dict[str, dict[str, int]] = {}
    for table in config.tables:
        if not lakehouse.exists(table):
            context.log.info(f"compact {table}: no such table yet, skipped")
            continue
        result = lakehouse.compact(table, metadata=commit_metadata(context, partition_key=None))
        compacted[table] = {
            DELTA_VERSION: result.version,
            "files_removed": result.metrics.get("files_removed", 0),
            "files_added": result.metrics.get("files_added", 0),
        }
        context.log.info(f"compact {table}: {compacted[table]}")
    return dg.Output(None, metadata={"compacted": compacted})


@dg.job(
    description="Bin-pack the small files of Delta tables into files of their target size "
    "(OPTIMIZE compaction). Rows are unchanged; a writer racing it retries its commit."
)
def compact_tables() -> None:
    compact_delta_tables()


jobs = [restore_table, vacuum_table, compact_tables]
