"""The `device_snapshot` asset and the `point_device_snapshot` job (the Proxy pattern,
see assets/immutable/proxy.py)."""

import datetime as dt

import dagster as dg
from pydantic import Field

from assets.automation import after_upstream
from assets.catalog import RESTORE_PROXY, declared
from assets.immutable.proxy import (
    SNAPSHOT_MANIFEST,
    SnapshotEntry,
    current_snapshot,
    drop_retired,
    manifest_entries,
    point_at,
    retire,
    snapshot_table,
    write_manifest,
    write_once,
)
from assets.materialization import (
    DELTA_VERSION,
    TABLE_NAME,
    commit_metadata,
    standard_table_metadata,
)
from assets.run_policy import NO_RETRY_ON_REFUSAL
from assets.updates.stateful_merger import DEVICE_CATALOG, device_catalog
from resources import Lakehouse


class DeviceSnapshotConfig(dg.Config):
    keep_snapshots: int = Field(
        default=3,
        description="Snapshots kept besides being retired, newest first (the current one "
        "always is).",
    )
    grace_hours: float = Field(
        default=24.0,
        description="A snapshot is retired only this long after it stopped being current, "
        "so readers that found it just before a switch can finish.",
    )


def _snapshot_metadata(lakehouse: Lakehouse, entry: SnapshotEntry, manifest_version: int) -> dict:
    return {
        "snapshot": entry.snapshot,
        "snapshot_uri": dg.MetadataValue.path(lakehouse.uri(entry.snapshot)),
        "run_of_snapshot": entry.run_id,
        "source_version": dg.MetadataValue.int(entry.source_version),
        "rows": dg.MetadataValue.int(entry.rows),
        # Readers see the snapshot: its schema and rows are the asset's.
        **standard_table_metadata(lakehouse, entry.snapshot),
        TABLE_NAME: SNAPSHOT_MANIFEST,
        DELTA_VERSION: dg.MetadataValue.int(manifest_version),
    }


def _serving(entries: list[SnapshotEntry]) -> SnapshotEntry:
    """The snapshot the manifest `entries` point readers at."""
    current = current_snapshot(entries)
    if current is None:
        raise dg.Failure("the snapshot manifest points at no snapshot")
    return current


@dg.asset(
    deps=[device_catalog],
    # A snapshot of the catalog as it is: any day of it changing is reason enough.
    automation_condition=after_upstream(every_upstream_partition=False),
    group_name="immutable",
    kinds={"spark", "delta"},
    **declared("proxy", restore=RESTORE_PROXY, writes=["device_snapshot_manifest"]),
)
def device_snapshot(
    context: dg.AssetExecutionContext, config: DeviceSnapshotConfig, lakehouse: Lakehouse
) -> dg.MaterializeResult:
    """The device catalog as of this run, read through one access point: a new write-once
    table `device_snapshot/run=<run id>` per run, and the manifest
    `device_snapshot_manifest` switched to it in one commit. Read it with
    `read_device_snapshot` or the Spark SQL view `device_snapshot`; point back at an
    earlier snapshot with the `point_device_snapshot` job."""
    table = snapshot_table(context.run.run_id)
    metadata = commit_metadata(context, partition_key=None)
    entries = manifest_entries(lakehouse)
    if lakehouse.exists(table):
        # This run's retry: the snapshot was written in one commit, so it is whole.
        written = lakehouse.history(table)[-1]
        source_version = int(written.metadata["source_version"])
        context.log.info(f"{table} was written by this run before its retry: reused")
    else:
        catalog_version = lakehouse.version(DEVICE_CATALOG)
        if catalog_version is None:
            raise dg.Failure(f"{DEVICE_CATALOG} does not exist yet: materialize it first")
        source_version = catalog_version
        write_once(
            lakehouse,
            table,
            lakehouse.read(DEVICE_CATALOG, version=source_version),
            metadata={**metadata, "source_version": source_version},
        )
    now = dt.datetime.now(dt.UTC)
    new = SnapshotEntry(
        table, context.run.run_id, source_version, lakehouse.count(table), now, "kept", now
    )
    entries = [e for e in entries if e.snapshot != table] + [new]
    entries = point_at(entries, table, now=now)
    entries = retire(
        entries, now=now, keep=config.keep_snapshots, grace=dt.timedelta(hours=config.grace_hours)
    )
    result = write_manifest(lakehouse, entries, metadata={**metadata, "current": table})
    dropped = drop_retired(lakehouse, entries)
    return dg.MaterializeResult(
        metadata={
            **_snapshot_metadata(lakehouse, _serving(entries), result.version),
            "snapshots_kept": dg.MetadataValue.int(sum(e.status != "retired" for e in entries)),
            "retired_now": ", ".join(dropped),
        }
    )


class PointSnapshotConfig(dg.Config):
    run_id: str = Field(
        description="The Dagster run whose snapshot the proxy should point at (see "
        "device_snapshot_manifest)."
    )


@dg.op
def point_device_snapshot_op(
    context: dg.OpExecutionContext, config: PointSnapshotConfig, lakehouse: Lakehouse
) -> None:
    entries = point_at(
        manifest_entries(lakehouse),
        snapshot_table(config.run_id),
        now=dt.datetime.now(dt.UTC),
    )
    result = write_manifest(
        lakehouse,
        entries,
        metadata={**commit_metadata(context, partition_key=None), "pointed_at": config.run_id},
    )
    current = _serving(entries)
    context.log.info(f"device_snapshot now points at {current.snapshot}")
    # What the asset serves changed: recorded as its materialization.
    context.log_event(
        dg.AssetMaterialization(
            asset_key=device_snapshot.key,
            metadata={
                **_snapshot_metadata(lakehouse, current, result.version),
                "pointed_back_by": context.run.run_id,
            },
        )
    )


@dg.job(
    tags=NO_RETRY_ON_REFUSAL,
    description="Point the device_snapshot proxy at an earlier snapshot (config: run_id of "
    "the run that wrote it), in one manifest commit. Refused for a retired snapshot.",
)
def point_device_snapshot() -> None:
    point_device_snapshot_op()


device_snapshot_job = dg.define_asset_job(
    "device_snapshot_job",
    selection=[device_snapshot],
    description="Write a new write-once snapshot of device_catalog and point readers at it.",
)
