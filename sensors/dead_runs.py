"""`dead_runs`: a started run whose process is gone is marked failed, so run retries
take it up.

A run's process is started by the code server (Dagster's DefaultRunLauncher), which
reports the run failed when its process dies, but only while that code server lives: kill
the code server, then a run process it left behind, and the run stays STARTED forever, its
partitions never built again and its slot in the run queue taken. Dagster's run monitoring
does not look at such a run (DefaultRunLauncher has no health check, and a launcher's
health check has no public form), so this sensor does, from the code server that serves
now, on the host where DefaultRunLauncher starts every run.

A run's process is the one whose pid its RUN_START event carries (Dagster records the pid
of the process that emits each event). It is alive when a process of that pid exists, is
no zombie and was started before the event: pids are reused. A process found gone is
marked failed at the next tick, when it is still STARTED: the code server that started it,
when it lives, reports it first, and a run is failed once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import dagster as dg
import psutil

INTERVAL_SECONDS = 10


@dataclass(frozen=True)
class Worker:
    """The process that runs a run: its pid, and when the run recorded it."""

    pid: int
    recorded: float

    def lives(self) -> bool:
        try:
            process = psutil.Process(self.pid)
            alive = process.status() != psutil.STATUS_ZOMBIE
            return alive and process.create_time() <= self.recorded
        except psutil.Error:
            return False


def run_worker(instance: dg.DagsterInstance, record: dg.RunRecord) -> Worker | None:
    """The process of a started run (None: the run has not started)."""
    if record.start_time is None:
        return None
    # The run's start time is its RUN_START event's: the events of that second hold it.
    window = dg.RunStatusChangeRecordsFilter(
        dg.DagsterEventType.RUN_START,
        after_timestamp=record.start_time - 1,
        before_timestamp=record.start_time + 1,
    )
    for event in instance.fetch_run_status_changes(window, limit=1000).records:
        dagster_event = event.event_log_entry.dagster_event
        if event.run_id == record.dagster_run.run_id and dagster_event and dagster_event.pid:
            return Worker(dagster_event.pid, event.timestamp)
    return None


@dg.sensor(
    minimum_interval_seconds=INTERVAL_SECONDS,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Marks a started run failed when its process is gone (killed, or crashed) "
    "and nothing reported it, so run retries take it up.",
)
def dead_runs(context: dg.SensorEvaluationContext) -> dg.SkipReason:
    instance = context.instance
    seen_dead = set(json.loads(context.cursor or "[]"))
    dead, failed = [], []
    for record in instance.get_run_records(dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])):
        worker = run_worker(instance, record)
        if worker is None or worker.lives():
            continue
        run_id = record.dagster_run.run_id
        run = instance.get_run_by_id(run_id)
        if run is None or run.status != dg.DagsterRunStatus.STARTED:
            continue  # it ended between the two reads
        if run_id not in seen_dead:
            dead.append(run_id)  # its code server, if it lives, has a tick to report it
            continue
        instance.report_run_failed(
            run,
            f"The run's process (pid {worker.pid}) is gone: it was killed or crashed, "
            "and nothing reported it.",
        )
        failed.append(run_id)
    context.update_cursor(json.dumps(sorted(dead)))
    if failed:
        return dg.SkipReason(f"Marked failed, their process gone: {', '.join(failed)}")
    return dg.SkipReason("The process of every started run lives.")
