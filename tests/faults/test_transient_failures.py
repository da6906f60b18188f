"""A failure that is not the data's is retried in the run, with backoff, then asked for
again by its sensor, with a longer backoff, until it lands; one that is the data's fails
at once, with its message (`assets.run_policy.TRANSIENT_RETRIES`,
`sensors/requested_again.py`).

The transient case is the one seen under load: the long-lived Spark dies while an
`event_batch_job` run is inside `user_events_staging`. The run process is a real one
(`dagster job execute`, as the run launcher starts it), attached to a long-lived Spark
of this test's own, which the test kills by its pid in the middle of the step."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import dagster as dg
import pytest
from support import (
    PROJECT_ROOT,
    day_of_visits,
    instance_home,
    partition_range,
    run_process_env,
)

from assets.overwriting import visits_daily, visits_daily_job
from assets.warehouse import (
    EventSettings,
    event_batch_job,
    event_batches,
    user_events,
    user_events_staging,
)
from assets.warehouse.events_source import batch_file
from assets.warehouse.staging_merge import USER_EVENTS
from resources import Lakehouse
from resources.spark_server import SparkServer, alive, free_port, long_lived_spark
from sensors.event_batches import event_batch_files
from sensors.requested_again import AGAIN_OF_TAG, ATTEMPT_TAG, requested_again
from sensors.visits_late_files import visits_late_files

LINES = 300_000
"""Enough for the staging step to take several seconds on the long-lived Spark."""


def write_batch(
    landing,
    batch_id: str,
    lines: int,
    *,
    bad_line: int | None = None,
    timestamp: str = "2024-05-01T10:00:00+00:00",
) -> None:
    path = Path(landing.root) / batch_file(batch_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as out:
        for i in range(1, lines + 1):
            event = {
                "event_id": f"e{i}",
                "event_timestamp": timestamp,
                "ingestion_time": "2024-05-02T00:00:00+00:00",
                "user_id": f"u{i % 100}",
                "payload": {"n": i},
            }
            if i == bad_line:
                event["user_id"] = 7
            out.write(json.dumps(event) + "\n")


def test_a_refused_batch_fails_at_once_with_its_file_and_line(
    resources, instance, landing, lakehouse
):
    write_batch(landing, "bad", 3, bad_line=2)
    instance.add_dynamic_partitions(event_batches.name, ["bad"])
    job = dg.Definitions(
        assets=[user_events_staging, user_events],
        jobs=[event_batch_job],
        resources={**resources, "event_settings": EventSettings()},
    ).resolve_job_def(event_batch_job.name)
    result = job.execute_in_process(instance=instance, partition_key="bad", raise_on_error=False)
    assert not result.success
    kinds = [event.event_type for event in result.all_events]
    assert dg.DagsterEventType.STEP_UP_FOR_RETRY not in kinds
    (failure,) = [event for event in result.all_events if event.is_step_failure]
    assert "events/bad.jsonl:2: field 'user_id' is BIGINT, not text" in str(
        failure.step_failure_data.error
    )
    assert not lakehouse.exists(USER_EVENTS)


# A long fault injection (122 s alone, 240 s in the suite, past its 600 s timeout when the
# machine is loaded): `make test-slow`.
@pytest.mark.slow
def test_a_run_whose_long_lived_spark_dies_mid_step_retries_it_and_publishes(tmp_path, landing):
    lakehouse = Lakehouse(root=str(tmp_path / "lakehouse"), engine="delta-rs")
    write_batch(landing, "b1", LINES)
    home = instance_home(tmp_path / "home")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions(event_batches.name, ["b1"])
    state = tmp_path / "spark" / "connect"
    # Ports of its own, not Spark's defaults: the session's other long-lived Spark (of
    # another test process) may start while this one is dead, and would take a default
    # port its successor needs.
    connect = free_port()
    ports = {"SPARK_CONNECT_PORT": str(connect), "SPARK_JDBC_PORT": str(free_port(besides=connect))}
    with long_lived_spark(state, ports, say=lambda line: None) as spark_env:
        first = SparkServer(state).description()
        assert first is not None
        run = subprocess.Popen(
            [
                *(sys.executable, "-m", "dagster", "job", "execute"),
                *("-f", "platform/definitions.py", "-j", event_batch_job.name),
                *("--tags", json.dumps({"dagster/partition": "b1"})),
            ],
            cwd=PROJECT_ROOT,
            env=run_process_env(home, lakehouse, landing, spark_env),
            stderr=subprocess.STDOUT,
            stdout=subprocess.PIPE,
            text=True,
        )
        output: list[str] = []
        staging = threading.Event()

        def read() -> None:
            assert run.stdout is not None
            for line in run.stdout:
                output.append(line)
                if 'Started execution of step "user_events_staging"' in line:
                    staging.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            assert staging.wait(300), "".join(output)[-3000:]
            time.sleep(1.5)  # inside the step: its session open, its first jobs running
            os.killpg(first.pid, signal.SIGKILL)
            assert run.wait(600) == 0, "".join(output)[-5000:]
        finally:
            if run.poll() is None:
                run.kill()
        reader.join(10)
        second = SparkServer(state).description()
        assert second is not None and second.pid != first.pid and alive(second.pid)

    said = "".join(output)
    assert 'Execution of step "user_events_staging" failed and has requested a retry' in said
    assert f"The long-lived Spark at {first.remote} is not answering" in said
    assert "RUN_SUCCESS" in said
    assert lakehouse.count(USER_EVENTS) == LINES


def test_work_whose_run_failed_on_something_else_than_its_data_is_asked_for_again(
    tmp_path, landing, spark, instance
):
    """After its retries, a run that failed on something transient (here: the lakehouse's
    folder is a file) gets its work asked for again, after a backoff that doubles with each
    attempt; a refused batch and a batch that failed its audit are never asked for again.
    The runs are real runs of `event_batch_job` on the instance, tagged as the sensor's."""
    write_batch(landing, "b1", 3)
    write_batch(landing, "bad", 3, bad_line=2)
    write_batch(landing, "late", 1, timestamp="1999-12-31T23:59:59+00:00")
    instance.add_dynamic_partitions(event_batches.name, ["b1", "bad", "late"])
    (tmp_path / "blocked").write_text("a file where the lakehouse's folder should be")
    broken = Lakehouse(root=str(tmp_path / "blocked" / "lake"), engine="delta-rs", spark=spark)
    healthy = Lakehouse(root=str(tmp_path / "lake"), engine="delta-rs", spark=spark)
    sensor = event_batch_files.name

    def run(batch_id: str, lakehouse: Lakehouse, tags: dict[str, str] | None = None):
        # The job as deployed, less its step retries (they would wait 22 s here).
        job = dg.define_asset_job(event_batch_job.name, tags=event_batch_job.tags)
        return (
            dg.Definitions(
                assets=[user_events_staging, user_events],
                jobs=[job],
                resources={
                    "spark": spark,
                    "lakehouse": lakehouse,
                    "landing": landing,
                    "event_settings": EventSettings(),
                },
            )
            .resolve_job_def(job.name)
            .execute_in_process(
                instance=instance,
                partition_key=batch_id,
                tags={"dagster/sensor_name": sensor, **(tags or {})},
                raise_on_error=False,
            )
        )

    since = time.time()

    def due(now: float):
        return requested_again(instance, sensor, since, now)

    failed = run("b1", broken)
    (failure,) = [event for event in failed.all_events if event.is_step_failure]
    assert "Not a directory" in str(failure.step_failure_data.error)
    assert not run("bad", healthy).success
    late = run("late", healthy)  # refused by its audit: a blocking check fails
    assert not late.success and not all(c.passed for c in late.get_asset_check_evaluations())
    assert not failed.success
    ended = instance.get_run_record_by_id(failed.run_id).end_time

    waiting = due(ended + 1)
    assert waiting.requests == [] and waiting.since < ended
    (again,) = due(ended + 61).requests
    assert again.partition_key == "b1" and again.run_key == f"again:{failed.run_id}"
    assert again.tags == {ATTEMPT_TAG: "1", AGAIN_OF_TAG: failed.run_id}

    # The second attempt fails too: the next waits twice as long.
    second = run("b1", broken, again.tags)
    assert not second.success
    ended = instance.get_run_record_by_id(second.run_id).end_time
    assert not due(ended + 61).requests
    (third,) = due(ended + 121).requests
    assert third.tags[ATTEMPT_TAG] == "2" and third.run_key == f"again:{second.run_id}"

    # The third lands: nothing is asked for again, ever.
    assert run("b1", healthy, third.tags).success
    assert healthy.count(USER_EVENTS) == 3
    assert not due(ended + 10**6).requests


def test_a_failed_range_of_days_is_asked_for_again_as_that_range(
    tmp_path, landing, spark, instance, write_visits
):
    """A range whose days failed on something else than their data is asked for again as
    that range; one whose failed day was refused (a bad line) is not."""
    days = [dt.date(2024, 4, 1), dt.date(2024, 4, 2)]
    refused_days = [dt.date(2024, 4, 8), dt.date(2024, 4, 9)]
    for day in days + refused_days:
        write_visits(day, "part.jsonl", day_of_visits(day, 4))
    write_visits(refused_days[1], "bad.jsonl", "{not json\n")
    (tmp_path / "blocked").write_text("a file where the lakehouse's folder should be")
    broken = Lakehouse(root=str(tmp_path / "blocked" / "lake"), engine="delta-rs", spark=spark)
    healthy = Lakehouse(root=str(tmp_path / "lake"), engine="delta-rs", spark=spark)
    since, sensor = time.time(), visits_late_files.name

    def run(lakehouse: Lakehouse, first: dt.date, last: dt.date):
        return (
            dg.Definitions(
                assets=[visits_daily],
                jobs=[visits_daily_job],
                resources={"spark": spark, "lakehouse": lakehouse, "landing": landing},
            )
            .resolve_job_def(visits_daily_job.name)
            .execute_in_process(
                instance=instance,
                tags={"dagster/sensor_name": sensor, **partition_range(first, last)},
                raise_on_error=False,
            )
        )

    assert not run(healthy, *refused_days).success
    failed = run(broken, *days)
    (failure,) = [event for event in failed.all_events if event.is_step_failure]
    assert "Not a directory" in str(failure.step_failure_data.error)
    ended = instance.get_run_record_by_id(failed.run_id).end_time
    (again,) = requested_again(instance, visits_late_files.name, since, ended + 61).requests
    assert (again.job_name, again.partition_key) == (visits_daily_job.name, None)
    assert again.tags == {
        **partition_range(*days),
        ATTEMPT_TAG: "1",
        AGAIN_OF_TAG: failed.run_id,
    }
