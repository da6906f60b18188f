"""Event batches: registers each landed `events/<batch_id>.jsonl` as a partition of
`event_batches` and requests `event_batch_job` runs. Only files whose size or mtime moved
are hashed (`sensors/file_state.py`).

The batches new to a tick are one run: they are registered together, so they are
adjacent in the partitions' order, and the job stages, audits and publishes each of them
as a run of it alone would (a run process per batch cost more than the batch: at 3,000
files an hour the run queue held a minute of work). A batch that changed is a run of its
own. Run keys carry the batches' content digests, so a re-notified unchanged batch
launches nothing and a changed one runs again. A run of several batches that failed on
the data of one (a bad line, a failed audit) is asked for again batch by batch, at once,
so the bad batch fails alone and the others land; a run that failed on something else is
asked for again, with backoff, until it lands (`sensors/requested_again.py`)."""

import hashlib

import dagster as dg

from assets.partition_range import run_partitions
from assets.warehouse import event_batch_job, event_batches
from assets.warehouse.events_source import EVENTS_FOLDER
from assets.warehouse.user_events import EVENT_BATCHES
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
    description="Requests `event_batch_job` runs (stage, audit, publish to user_events) for "
    "new or changed events/<batch_id>.jsonl files: the batches new to a tick in one run, a "
    "changed one alone; run keys carry their digests. A run of several that failed on one "
    "batch's data is asked for again batch by batch.",
)
def event_batch_files(
    context: dg.SensorEvaluationContext, landing: LandingZone, lakehouse: Lakehouse
) -> dg.SensorResult:
    scan = file_state.scan(
        event_batch_files.name, context, lakehouse, landing, [(EVENTS_FOLDER, SUFFIX)]
    )
    keys: dict[str, str] = {}  # batch id -> run key, of the batches with new content
    skipped, first_seen = [], []
    for path in sorted(scan.touched):
        fingerprint = scan.current.get(path)
        if fingerprint is None:
            continue
        batch_id = batch_id_of(path)
        if batch_id is None:
            skipped.append(path)
            continue
        if scan.is_new_content(path):
            keys[batch_id] = f"{batch_id}:{fingerprint.sha256}"
        if path not in scan.previous:
            first_seen.append(batch_id)
    # Registered by this tick, so after every batch before them: one run. A batch
    # registered before (changed, or landed again after it was removed): a run of its own.
    fresh = set(first_seen) - registered(context.instance, first_seen)
    new = [(b, key) for b, key in keys.items() if b in fresh]
    changed = [(b, key) for b, key in keys.items() if b not in fresh]
    if skipped:
        context.log.warning(
            f"not event batches (the layout is {EVENTS_FOLDER}/<batch_id>{SUFFIX}): "
            + ", ".join(skipped[:20])
        )
    requests = [dg.RunRequest(run_key=key, partition_key=batch) for batch, key in changed]
    if new:
        requests.append(batches_run(new))
    again = requested_again.due(
        context, event_batch_files.name, members=lambda run: batches_of(context, run)
    )
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


READ_ALL_ABOVE = 200
"""Batches first seen by a tick beyond which it reads every registered batch once rather
than asking for each (one query each)."""


def registered(instance: dg.DagsterInstance, batch_ids: list[str]) -> set[str]:
    """Which of `batch_ids` are partitions of `event_batches` already."""
    if len(batch_ids) > READ_ALL_ABOVE:
        return set(batch_ids) & set(instance.get_dynamic_partitions(EVENT_BATCHES))
    return {b for b in batch_ids if instance.has_dynamic_partition(EVENT_BATCHES, b)}


def batches_run(batches: list[tuple[str, str]]) -> dg.RunRequest:
    """One run of the `(batch_id, run_key)` batches, adjacent partitions in this order."""
    first, last = batches[0][0], batches[-1][0]
    partition_key, range_tags = run_partitions(first, last)
    if partition_key is not None:
        return dg.RunRequest(run_key=batches[0][1], partition_key=partition_key)
    digest = hashlib.sha256("\n".join(key for _, key in batches).encode()).hexdigest()
    return dg.RunRequest(run_key=f"{first}..{last}:{digest[:20]}", tags=range_tags)


def batches_of(context: dg.SensorEvaluationContext, run: dg.DagsterRun) -> list[str]:
    """The batches of a run of several (read from every registered batch: asked only for
    a run that failed on its data)."""
    span = dg.PartitionKeyRange(
        run.tags["dagster/asset_partition_range_start"],
        run.tags["dagster/asset_partition_range_end"],
    )
    with dg.partition_loading_context(dynamic_partitions_store=context.instance):
        return list(event_batches.get_partition_keys_in_range(span))
