"""Event batches: registers each landed `events/<batch_id>.jsonl` as a partition of
`event_batches` and requests its `event_batch_job` run. Run keys are the batch's content
digest, so a re-notified unchanged batch launches nothing and a changed one runs again.
Only files whose size or mtime moved are hashed (`sensors/file_state.py`). A batch whose
run failed on something other than its data is asked for again, with backoff, until it
lands (`sensors/requested_again.py`)."""

import dagster as dg

from assets.warehouse import event_batch_job, event_batches
from assets.warehouse.events_source import EVENTS_FOLDER
from resources import Lakehouse, LandingZone
from sensors import file_state, requested_again
from sensors.cadence import file_sensor

SUFFIX = ".jsonl"


def batch_id_of(path: str) -> str | None:
    """`events/<batch_id>.jsonl` -> batch id; None for files in sub-folders (not batches)."""
    name = path.removeprefix(f"{EVENTS_FOLDER}/")
    if "/" in name or not name.endswith(SUFFIX) or name == SUFFIX:
        return None
    return name.removesuffix(SUFFIX)


@file_sensor(
    job=event_batch_job,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Requests an `event_batch_job` run (stage, audit, publish to user_events) for "
    "every new or changed events/batch=<id>.jsonl file; run keys carry its digest.",
)
def event_batch_files(
    context: dg.SensorEvaluationContext, landing: LandingZone, lakehouse: Lakehouse
) -> dg.SensorResult:
    scan = file_state.scan(
        event_batch_files.name, context, lakehouse, landing, [(EVENTS_FOLDER, SUFFIX)]
    )
    requests, skipped, first_seen = [], [], []
    for path in sorted(scan.touched):
        fingerprint = scan.current.get(path)
        if fingerprint is None:
            continue
        batch_id = batch_id_of(path)
        if batch_id is None:
            skipped.append(path)
            continue
        if path not in scan.previous:
            first_seen.append(batch_id)
        if scan.is_new_content(path):
            requests.append(
                dg.RunRequest(run_key=f"{batch_id}:{fingerprint.sha256}", partition_key=batch_id)
            )
    if skipped:
        context.log.warning(
            f"not event batches (the layout is {EVENTS_FOLDER}/<batch_id>{SUFFIX}): "
            + ", ".join(skipped[:20])
        )
    again = requested_again.due(context, event_batch_files.name)
    return dg.SensorResult(
        run_requests=requests + again.requests,
        # The batches of files new to the state: reading every registered key instead cost
        # a tick 0.2 s per 20,000 batches (and the daemon skips any key already added).
        dynamic_partitions_requests=[event_batches.build_add_request(first_seen)]
        if first_seen
        else [],
        # Files that are no batch are not remembered: named again while they are there.
        cursor=scan.cursor(lakehouse, leave_out=skipped, extra=again.cursor),
    )
