"""`dead_runs` marks a started run failed when its process is gone, so run retries take
it up: also when the code server that started the process died before it, and so cannot
report it. The run's process here is a real one, a job executing against an instance
configured by `platform/dagster.yaml`, waiting until it is killed; nothing reports its
death but the sensor."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
from support import instance_home

from sensors.dead_runs import Worker, dead_runs, run_worker

WAITING_RUN = """
import sys, time
import dagster as dg

@dg.op
def waits() -> None:
    time.sleep(600)

@dg.job
def waiting_job() -> None:
    waits()

with dg.DagsterInstance.from_config(sys.argv[1]) as instance:
    waiting_job.execute_in_process(instance=instance)
"""


@pytest.fixture
def home(tmp_path) -> Path:
    return instance_home(tmp_path / "dagster")


@pytest.fixture
def instance(home) -> Iterator[dg.DagsterInstance]:
    with dg.DagsterInstance.from_config(str(home)) as instance:
        yield instance


@pytest.fixture
def started_run(home, instance) -> Iterator[tuple[subprocess.Popen, dg.RunRecord]]:
    """A run whose process (returned with it) executes its step, until it is killed. Its
    process group goes with it: the `tail -F` that Dagster starts to capture the step's
    logs outlives a killed run process."""
    process = subprocess.Popen(
        [sys.executable, "-c", WAITING_RUN, str(home)], start_new_session=True
    )
    try:
        deadline = time.monotonic() + 60
        while not (records := started(instance)):
            assert process.poll() is None and time.monotonic() < deadline, "no run started"
            time.sleep(0.2)
        yield process, records[0]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def started(instance: dg.DagsterInstance) -> list[dg.RunRecord]:
    return list(instance.get_run_records(dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])))


def tick(instance: dg.DagsterInstance, cursor: str | None) -> tuple[str, str | None]:
    context = dg.build_sensor_context(instance=instance, cursor=cursor)
    skipped = dead_runs(context)
    return skipped.skip_message, context.cursor


def status(instance: dg.DagsterInstance, record: dg.RunRecord) -> dg.DagsterRunStatus:
    return instance.get_run_by_id(record.dagster_run.run_id).status


def test_a_run_is_known_by_the_process_that_started_it(instance, started_run):
    process, record = started_run
    worker = run_worker(instance, record)
    assert worker is not None and worker.pid == process.pid and worker.lives()


def test_a_started_run_whose_process_lives_is_left_running(instance, started_run):
    _, record = started_run
    cursor = None
    for _ in range(2):
        message, cursor = tick(instance, cursor)
        assert message == "The process of every started run lives."
    assert status(instance, record) == dg.DagsterRunStatus.STARTED


def test_a_started_run_whose_process_was_killed_is_marked_failed_at_the_next_tick(
    instance, started_run
):
    process, record = started_run
    process.kill()
    process.wait()
    # The first tick leaves its code server (when it lives) the time to report it.
    message, cursor = tick(instance, None)
    assert status(instance, record) == dg.DagsterRunStatus.STARTED
    message, cursor = tick(instance, cursor)
    run_id = record.dagster_run.run_id
    assert message == f"Marked failed, their process gone: {run_id}"
    assert status(instance, record) == dg.DagsterRunStatus.FAILURE
    failure = instance.fetch_run_status_changes(dg.DagsterEventType.RUN_FAILURE, limit=1)
    assert f"(pid {process.pid}) is gone" in failure.records[0].event_log_entry.message
    # A failed run is not failed again.
    assert tick(instance, cursor)[0] == "The process of every started run lives."


def test_a_pid_taken_by_a_later_process_is_not_the_run_worker():
    later = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        # Recorded a minute before `later` started: `later` has the pid, not the run.
        assert not Worker(later.pid, recorded=time.time() - 60).lives()
        assert Worker(later.pid, recorded=time.time()).lives()
    finally:
        later.kill()
        later.wait()
