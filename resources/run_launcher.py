"""The instance's run launcher: Dagster's DefaultRunLauncher (the code server starts a
process per run, on its own host), with the health check run monitoring asks of it.

DefaultRunLauncher answers none, so run monitoring never looks at a STARTED run. A run
whose process dies is still reported failed by the code server that started it, but only
while that code server lives: kill the code server, then a run process it left behind,
and the run stays STARTED forever, its partitions never built again. Here a run's worker
is the process whose pid the run recorded when it began ("Started process for run (pid:
N)"), and it is alive when a process of that pid exists, is no zombie, and was started
before the record (pids are reused). Run monitoring (`run_monitoring` in dagster.yaml)
marks a run whose worker is gone failed, and run retries re-execute it.

The pid means something only on the host that runs the code server, which is where
DefaultRunLauncher's runs are: a deployment whose daemon is on another host uses a
launcher of its platform (Kubernetes, ECS, Docker), which checks its own workers.

A configured run launcher is Dagster's extension point for this, and the two types its
health check answers with are not exported by `dagster` itself: they are imported from
`dagster._core.launcher`, as Dagster's own launchers (dagster-k8s, dagster-docker,
dagster-celery-k8s) import them. pyproject pins Dagster to 1.13.x, and
tests/faults/test_run_monitoring.py fails if they move.
"""

from __future__ import annotations

import dagster as dg
import psutil
from dagster._core.launcher import CheckRunHealthResult, DefaultRunLauncher, WorkerStatus

STARTED_PROCESS = "Started process for run"
"""The start of the message the run worker logs with its pid, before the run starts."""


class LocalRunLauncher(DefaultRunLauncher):
    """DefaultRunLauncher whose run workers run monitoring can check."""

    def __init__(self, inst_data=None) -> None:
        super().__init__(inst_data=inst_data)
        self._workers: dict[str, tuple[int, float]] = {}
        """Run id -> the worker's pid and when it was recorded: read once per run."""

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: dg.DagsterRun) -> CheckRunHealthResult:
        worker = self._workers.get(run.run_id) or run_worker(self._instance, run.run_id)
        if worker is None:
            # Not recorded yet (or launched some other way): nothing says it is gone.
            return CheckRunHealthResult(WorkerStatus.RUNNING)
        self._workers[run.run_id] = worker
        pid, recorded = worker
        if lives(pid, before=recorded):
            return CheckRunHealthResult(WorkerStatus.RUNNING)
        del self._workers[run.run_id]
        return CheckRunHealthResult(
            WorkerStatus.FAILED,
            f"The run's process (pid {pid}) is gone: it was killed or crashed.",
        )


def run_worker(instance: dg.DagsterInstance, run_id: str) -> tuple[int, float] | None:
    """The pid the run's worker recorded, and when (None: not recorded)."""
    records = instance.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.ENGINE_EVENT, limit=20
    ).records
    for record in records:
        entry = record.event_log_entry
        event = entry.dagster_event
        if event is None or not (event.message or "").startswith(STARTED_PROCESS):
            continue
        pid = event.engine_event_data.metadata.get("pid")
        if pid is not None:
            return int(str(pid.value)), entry.timestamp
    return None


def lives(pid: int, *, before: float) -> bool:
    """Whether a process of `pid` lives (no zombie) and was started before `before`."""
    try:
        process = psutil.Process(pid)
        return process.status() != psutil.STATUS_ZOMBIE and process.create_time() <= before
    except psutil.Error:
        return False
