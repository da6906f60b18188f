"""Run monitoring finds a started run whose process is gone, through the instance's run
launcher (`resources/run_launcher.py`), and marks it failed so run retries take it up:
also when the code server that started the process died before it, and so cannot report
it. The run worker here is a real process recorded the way Dagster's own run worker
records itself ("Started process for run (pid: N)"); the monitoring is Dagster's own
daemon code, on an instance configured by `platform/dagster.yaml`."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from collections.abc import Iterator

import dagster as dg
import pytest
from dagster._core.events import DagsterEvent, EngineEventData
from dagster._daemon.monitoring.run_monitoring import monitor_started_run
from support import instance_home

from resources.run_launcher import LocalRunLauncher


@dg.op
def work() -> None:
    pass


@dg.job
def some_job() -> None:
    work()


@pytest.fixture
def project_instance(tmp_path) -> Iterator[dg.DagsterInstance]:
    with dg.DagsterInstance.from_config(str(instance_home(tmp_path / "dagster"))) as instance:
        yield instance


def started_run(
    instance: dg.DagsterInstance, worker_pid: int, *, recorded_ago: float = 0.0
) -> dg.DagsterRun:
    """A run that started, whose worker recorded `worker_pid` `recorded_ago` seconds ago."""
    run = instance.create_run_for_job(some_job)
    message = f"Started process for run (pid: {worker_pid})."
    for event, ago in (
        (
            DagsterEvent(
                dg.DagsterEventType.ENGINE_EVENT.value,
                job_name=run.job_name,
                message=message,
                event_specific_data=EngineEventData.in_process(worker_pid),
            ),
            recorded_ago,
        ),
        (DagsterEvent(dg.DagsterEventType.RUN_START.value, job_name=run.job_name), 0.0),
    ):
        instance.handle_new_event(
            dg.EventLogEntry(
                error_info=None,
                level=logging.DEBUG,
                user_message=event.message or "",
                run_id=run.run_id,
                timestamp=time.time() - ago,
                dagster_event=event,
            )
        )
    return instance.get_run_by_id(run.run_id)


def monitor(instance: dg.DagsterInstance, run: dg.DagsterRun) -> dg.DagsterRun:
    record = instance.get_run_record_by_id(run.run_id)
    monitor_started_run(instance, None, record, logging.getLogger("run_monitoring"))
    return instance.get_run_by_id(run.run_id)


def sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])


def test_the_instance_checks_its_run_workers(project_instance):
    assert isinstance(project_instance.run_launcher, LocalRunLauncher)
    assert project_instance.run_monitoring_enabled


def test_a_started_run_whose_process_lives_is_left_running(project_instance):
    worker = sleeper()
    try:
        run = started_run(project_instance, worker.pid)
        assert monitor(project_instance, run).status == dg.DagsterRunStatus.STARTED
    finally:
        worker.kill()
        worker.wait()


def test_a_started_run_whose_process_was_killed_is_marked_failed_with_the_reason(
    project_instance,
):
    worker = sleeper()
    run = started_run(project_instance, worker.pid)
    worker.kill()
    worker.wait()
    assert monitor(project_instance, run).status == dg.DagsterRunStatus.FAILURE
    messages = [entry.message for entry in project_instance.all_logs(run.run_id)]
    assert any(f"(pid {worker.pid}) is gone" in message for message in messages)


def test_a_pid_taken_by_a_later_process_is_not_the_run_worker(project_instance):
    later = sleeper()
    try:
        # Recorded before `later` started: `later` has the pid, but is not the worker.
        run = started_run(project_instance, later.pid, recorded_ago=60)
        assert monitor(project_instance, run).status == dg.DagsterRunStatus.FAILURE
    finally:
        later.kill()
        later.wait()
