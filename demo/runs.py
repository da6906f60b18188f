"""Runs the demo launches: of the platform's own jobs, so they show in the UI under the
job's name (timeline, job pages) like any run the sensors or a user launch."""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg

from sensors.ticks import evaluate_tick

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
    as a backfill of them launches it (its assets have single-run backfill policies)."""
    if len(partitions) > 1:
        tags = {
            **tags,
            "dagster/asset_partition_range_start": partitions[0],
            "dagster/asset_partition_range_end": partitions[-1],
        }
    return defs.resolve_job_def(job_name).execute_in_process(
        partition_key=partitions[0] if len(partitions) == 1 else None,
        resources=resources,
        instance=instance,
        tags=tags,
        run_config=QUIET,
        raise_on_error=raise_on_error,
    )


@dataclass(frozen=True)
class Launched:
    job_name: str
    partition_key: str
    """The run's partition, or its range as `first..last`."""
    tags: dict[str, str]


def settle(
    sensor: dg.SensorDefinition,
    defs: dg.Definitions,
    *,
    resources: dict,
    instance: dg.DagsterInstance,
    cursor: str | None,
    tags: dict[str, str],
    job_name: str | None = None,
) -> tuple[str | None, list[Launched]]:
    """Ticks of `sensor`, each followed by the runs it asked for (of `job_name`, for a
    sensor whose requests name none), until a tick asks for none. Returns the cursor and
    the runs, in order."""
    sensor_resources = {"landing": resources["landing"], "lakehouse": resources["lakehouse"]}
    launched: list[Launched] = []
    while True:
        tick = evaluate_tick(sensor, instance, cursor, sensor_resources)
        cursor = tick.cursor if tick.cursor is not None else cursor
        if not tick.run_requests:
            return cursor, launched
        for request in tick.run_requests:
            job = request.job_name or job_name
            span = request.partition_key_range
            partitions = [request.partition_key] if span is None else [span.start, span.end]
            run_job(
                defs,
                job,
                partitions,
                resources=resources,
                instance=instance,
                tags={**request.tags, **tags, "dagster/run_key": request.run_key},
            )
            launched.append(Launched(job, "..".join(dict.fromkeys(partitions)), dict(request.tags)))
