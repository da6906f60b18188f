"""Work a sensor asked for whose run failed on something other than its data, asked for
again with backoff until a run of it lands.

A sensor's run key names its work (a batch and its content), and Dagster launches a key
once: without this, the work of a run that failed stays undone until a person
re-executes it. Each tick, the sensor looks at the runs it launched that failed since it
last looked (one query of the instance). A failure that is the data's own stays failed,
with its message: a `Refusal` (`assets/run_policy.py`: bad input, say) or a blocking
check that failed (an audit). Any other failure (an error that outlived the step's retries, a run
process that died and outlived the daemon's run retries) is asked for again, once per
failed run, under a run key of its own and `ATTEMPT_TAG`, after a backoff that doubles
with each attempt (`FIRST_BACKOFF` seconds, at most `LONGEST_BACKOFF`). A run of the
same partition created after the failed one (a new file, a re-execution from the UI, the
daemon's retry) takes its place. The work is asked for of the same job and partitions
(a range run's range too, and the job's tags: an updates pattern's days stay in order),
so it suits work that a run may redo, as the platform's idempotent writes are.

A sensor whose runs group partitions that each stand alone (event batches) also gets a
range run that failed on its data asked for again partition by partition, at once: the
bad partition then fails alone, and the others land."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import dagster as dg

from assets.run_policy import REFUSED
from sensors.file_state import cursor_extra

ATTEMPT_TAG = "lakehouse/attempt"
"""How many times the work of this run was asked for again after a failure."""
AGAIN_OF_TAG = "lakehouse/again_of"
"""The failed run whose work this run does again."""
FIRST_BACKOFF = 60.0
LONGEST_BACKOFF = 3600.0
CURSOR_KEY = "failed_since"
"""Where a sensor's cursor keeps `Again.since`."""
_CHECK_FAILED = "DagsterAssetCheckFailedError"


@dataclass(frozen=True)
class Again:
    requests: list[dg.RunRequest]
    since: float
    """Where the next tick looks from: the oldest failure still waiting out its backoff,
    or the newest one looked at."""

    @property
    def cursor(self) -> dict[str, float]:
        """What the sensor's cursor keeps of it."""
        return {CURSOR_KEY: self.since}


def due(
    context: dg.SensorEvaluationContext,
    sensor: str,
    *,
    members: Callable[[dg.DagsterRun], Sequence[str]] | None = None,
) -> Again:
    """`requested_again` for the tick of `sensor` in `context`, from where its cursor
    says the tick before looked."""
    again = requested_again(
        context.instance,
        sensor,
        cursor_extra(context.cursor, CURSOR_KEY),
        time.time(),
        members=members,
    )
    for request in again.requests:
        # In the tick's log: what the sensor asked for again, and why.
        if ATTEMPT_TAG in request.tags:
            context.log.info(
                f"asking again (attempt {request.tags[ATTEMPT_TAG]}) for the work of run "
                f"{request.tags[AGAIN_OF_TAG]}, which failed on something other than its data"
            )
        else:
            context.log.info(
                f"asking for {request.partition_key} alone: run {request.tags[AGAIN_OF_TAG]} "
                "of several partitions failed on the data of one of them"
            )
    return again


def backoff(attempt: int) -> float:
    return min(FIRST_BACKOFF * 2**attempt, LONGEST_BACKOFF)


def _refused(instance: dg.DagsterInstance, run_id: str) -> bool:
    """Whether the run failed on its data: a step's failure was a `Refusal`, or a
    blocking check failed."""
    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.STEP_FAILURE).records
    for record in records:
        event = record.event_log_entry.dagster_event
        data = event.step_failure_data if event is not None else None
        if data is None:
            continue
        marked = data.user_failure_data is not None and REFUSED in (
            data.user_failure_data.metadata or {}
        )
        if marked or (data.error is not None and data.error.cls_name == _CHECK_FAILED):
            return True
    return False


_WHICH_PARTITIONS = (
    "dagster/partition",
    "dagster/asset_partition_range_start",
    "dagster/asset_partition_range_end",
)
"""The tags that say which partitions a run builds: its partition, or its range."""


def _taken_over(instance: dg.DagsterInstance, run: dg.RunRecord) -> bool:
    """Whether a run of the same job and partitions was created after `run`."""
    tags = {k: v for k, v in run.dagster_run.tags.items() if k in _WHICH_PARTITIONS}
    newer = instance.get_run_records(
        dg.RunsFilter(
            job_name=run.dagster_run.job_name, tags=tags, created_after=run.create_timestamp
        ),
        limit=1,
    )
    return bool(newer)


def requested_again(
    instance: dg.DagsterInstance,
    sensor: str,
    since: float | None,
    now: float,
    *,
    members: Callable[[dg.DagsterRun], Sequence[str]] | None = None,
) -> Again:
    """The runs the sensor named `sensor` launched that failed after `since` (a POSIX
    time; None: a sensor that never looked, which looks from `now`) and whose work is due
    again at `now`: each asked for again, of the same job and partitions.

    With `members` (the partitions of a range run), a range run that failed on its data
    is asked for again partition by partition, at once: the partitions of a group whose
    every member stands alone (a batch, audited on its own) are not held back by one bad
    member, which then fails alone, named."""
    if since is None:
        return Again([], now)
    failed = instance.get_run_records(
        dg.RunsFilter(
            statuses=[dg.DagsterRunStatus.FAILURE],
            tags={"dagster/sensor_name": sensor},
            updated_after=dt.datetime.fromtimestamp(since, dt.UTC),
        ),
        ascending=True,
    )
    requests, waiting, newest = [], [], since
    for record in failed:
        run = record.dagster_run
        ended = record.end_time or record.update_timestamp.timestamp()
        newest = max(newest, record.update_timestamp.timestamp())
        if run.tags.get("dagster/will_retry") == "true":
            continue
        if _refused(instance, run.run_id):
            if members is not None and _WHICH_PARTITIONS[1] in run.tags:
                requests += _alone(run, members(run))
            continue
        if _taken_over(instance, record):
            continue
        attempt = int(run.tags.get(ATTEMPT_TAG, "0"))
        if now < ended + backoff(attempt):
            waiting.append(record.update_timestamp.timestamp())
            continue
        # The failed run's own tags (a subject's concurrency tag, say) and its range go
        # with its work.
        kept = {
            k: v
            for k, v in run.tags.items()
            if not k.startswith("dagster/") or k in _WHICH_PARTITIONS[1:]
        }
        requests.append(
            dg.RunRequest(
                run_key=f"again:{run.run_id}",
                job_name=run.job_name,
                partition_key=run.tags.get("dagster/partition"),
                tags={**kept, ATTEMPT_TAG: str(attempt + 1), AGAIN_OF_TAG: run.run_id},
            )
        )
    # Looked at again next tick: the failures still waiting (`updated_after` is strict).
    return Again(requests, min(waiting) - 0.001 if waiting else newest)


def _alone(run: dg.DagsterRun, keys: Sequence[str]) -> list[dg.RunRequest]:
    """A run of each of `keys`, the partitions of the failed range run `run`."""
    tags = {k: v for k, v in run.tags.items() if not k.startswith("dagster/") and k != ATTEMPT_TAG}
    return [
        dg.RunRequest(
            run_key=f"alone:{run.run_id}:{key}",
            job_name=run.job_name,
            partition_key=key,
            tags={**tags, AGAIN_OF_TAG: run.run_id},
        )
        for key in keys
    ]
