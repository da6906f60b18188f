"""Runs the demo launches itself (sources no sensor watches): of the platform's own jobs,
so they show in the UI under the job's name (timeline, job pages) like any run the
sensors or a user launch; and what a run materialized, read back from the instance."""

from __future__ import annotations

from collections.abc import Mapping

import dagster as dg

from assets.partition_range import run_partitions

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def run_job(
    defs: dg.Definitions,
    job_name: str,
    partitions: list[str],
    *,
    resources: dict,
    instance: dg.DagsterInstance,
    tags: dict[str, str],
    raise_on_error: bool = True,
) -> dg.ExecuteInProcessResult:
    """One run of `job_name` over the partitions from `partitions[0]` to `partitions[-1]`,
    as a backfill of them launches it (its assets have single-run backfill policies); no
    partitions for an unpartitioned job."""
    partition_key, range_tags = (
        run_partitions(partitions[0], partitions[-1]) if partitions else (None, {})
    )
    return defs.resolve_job_def(job_name).execute_in_process(
        partition_key=partition_key,
        resources=resources,
        instance=instance,
        tags={**tags, **range_tags},
        run_config=QUIET,
        raise_on_error=raise_on_error,
    )


def materializations(
    instance: dg.DagsterInstance, asset: str, run_id: str
) -> list[tuple[str, Mapping[str, dg.MetadataValue]]]:
    """(partition, metadata) of each materialization of `asset` by the run, in order."""
    records = instance.fetch_materializations(dg.AssetKey(asset), limit=1000).records
    return [
        (record.partition_key or "", record.asset_materialization.metadata)
        for record in reversed(records)
        if record.run_id == run_id
    ]
