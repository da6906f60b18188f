"""Enriched run directories: registration, and recovery of runs stuck in the manifest.

`enriched_run_directories` registers each finished run directory
(`enriched/run=<id>/` holding the upstream writer's `_SUCCESS`) as a partition of
`enriched_runs` and requests its `enriched_run_job` run (run key `enriched:<id>`: a directory
is requested once). A directory still being written (no `_SUCCESS`) is not picked up.
Its tick is a file sensor's (`sensors/file_state.py`): it looks only at the `_SUCCESS`
files that changed since the last tick, so it costs the directories that finished, not
the directories ever loaded.

`stuck_enriched_runs` takes up a run left in NEW or PROCESSED (a crash, a failed load)
for longer than `stuck_after_minutes` with no Dagster run in progress for it: it requests
`enriched_run_job` again, whose steps recover (see `assets/warehouse/manifest/shredder.py`).
The run key names the state and when the run entered it, so each stuck state is requested
once by the sensor.

The runs either sensor requested that failed on something other than their data are
asked for again, with backoff, until they land (`sensors/requested_again.py`); a run
refused for a bad line (its file and line in the failure) stays failed.
"""

import datetime as dt
import json

import dagster as dg

from assets.warehouse import ManifestSettings, enriched_run_job, enriched_runs
from assets.warehouse.manifest import load_manifest as manifest
from assets.warehouse.manifest.enriched import ENRICHED_FOLDER, SUCCESS, run_id_of
from assets.warehouse.manifest.pipeline import ENRICHED_RUNS
from resources import Lakehouse, LandingZone
from sensors import file_state, requested_again
from sensors.cadence import file_sensor

IN_PROGRESS = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]
MAX_LOGGED = 20


@file_sensor(
    job=enriched_run_job,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Registers each enriched/run=YYYY-MM-DD-HH-MM-SS/ directory once it holds "
    "_SUCCESS (a dynamic partition of enriched_runs) and requests its `enriched_run_job` run "
    "(run key enriched:<id>). Directories still being written are left alone.",
)
def enriched_run_directories(
    context: dg.SensorEvaluationContext, landing: LandingZone, lakehouse: Lakehouse
) -> dg.SensorResult:
    scan = file_state.scan(
        enriched_run_directories.name, context, lakehouse, landing, [(ENRICHED_FOLDER, SUCCESS)]
    )
    new, misplaced = [], []
    for path in sorted(scan.touched):
        if path not in scan.current or path in scan.previous:
            continue  # gone, or a directory already found
        folder, _, name = path.removeprefix(f"{ENRICHED_FOLDER}/").partition("/")
        run_id = run_id_of(folder)
        if run_id is None or name != SUCCESS:
            misplaced.append(path)
        else:
            new.append(run_id)
    if misplaced:
        context.log.warning(
            f"not run directories (the layout is {ENRICHED_FOLDER}/run=YYYY-MM-DD-HH-MM-SS/"
            f"{SUCCESS}): " + ", ".join(misplaced[:MAX_LOGGED])
        )
    again = requested_again.due(context, enriched_run_directories.name)
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=f"enriched:{r}", partition_key=r) for r in new]
        + again.requests,
        # The directories new to the state: reading every registered key instead grows
        # with the runs ever loaded (and the daemon skips any key already added).
        dynamic_partitions_requests=[enriched_runs.build_add_request(new)] if new else [],
        # Off the layout: not remembered, named again while they are there.
        cursor=scan.cursor(lakehouse, leave_out=misplaced, extra=again.cursor),
    )


def _in_progress(instance: dg.DagsterInstance, run_id: str) -> bool:
    records = instance.get_run_records(
        filters=dg.RunsFilter(
            job_name=enriched_run_job.name,
            tags={"dagster/partition": run_id},
            statuses=IN_PROGRESS,
        ),
        limit=1,
    )
    return bool(records)


@dg.sensor(
    job=enriched_run_job,
    minimum_interval_seconds=300,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Requests `enriched_run_job` again, once per stuck state, for load-manifest runs "
    "left in NEW or PROCESSED longer than stuck_after_minutes with no run in progress; a "
    "recovery that failed on something other than its data is asked for again, with backoff.",
)
def stuck_enriched_runs(
    context: dg.SensorEvaluationContext, lakehouse: Lakehouse, manifest_settings: ManifestSettings
) -> dg.SensorResult:
    cutoff = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=manifest_settings.stuck_after_minutes)
    stuck = [
        row
        for row in manifest.read(lakehouse, states=[manifest.NEW, manifest.PROCESSED]).values()
        if not row.to_skip and row.state_since <= cutoff
    ]
    requests = [
        dg.RunRequest(
            run_key=f"recover:{row.run_id}:{row.state}:{row.state_since.isoformat()}",
            partition_key=row.run_id,
            tags={"recovers": row.state},
        )
        for row in sorted(stuck, key=lambda r: r.run_id)
        if not _in_progress(context.instance, row.run_id)
    ]
    # Only runs no partition was registered for (a few, and only when runs are stuck):
    # asked one by one, not by reading every registered run on each tick.
    unregistered = sorted(
        key
        for key in (r.partition_key for r in requests)
        if key is not None and not context.instance.has_dynamic_partition(ENRICHED_RUNS, key)
    )
    again = requested_again.due(context, stuck_enriched_runs.name)
    return dg.SensorResult(
        run_requests=requests + again.requests,
        dynamic_partitions_requests=(
            [enriched_runs.build_add_request(unregistered)] if unregistered else []
        ),
        cursor=json.dumps(again.cursor),
    )
