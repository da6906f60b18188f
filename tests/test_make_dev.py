"""`make dev` (platform/dev.py) as a user runs it: the long-lived Spark and `dagster dev`
come up together on 127.0.0.1, a run launched from the UI's GraphQL API attaches to the
Spark (it boots no JVM of its own), declarative automation builds what follows from it,
and one Ctrl-C stops both, the Spark by its pid.

Slow: a Spark Connect server, `dagster dev` and a run process, about a minute."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest
from support import instance_home

from demo.dagster_dev import LOCATION, free_port, graphql, serves
from resources.spark_server import SparkServer, alive, server_state

PROJECT_ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
  }
}
"""


@dataclass(frozen=True)
class MakeDev:
    process: subprocess.Popen
    url: str
    home: Path
    log: Path


def start_make_dev(tmp_path: Path, landing, **popen) -> MakeDev:
    """platform/dev.py on a free loopback port, in its own process group, with an
    instance, a lakehouse and a landing zone under `tmp_path`."""
    home = instance_home(tmp_path / "dagster")
    port = free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("SPARK_REMOTE", "SPARK_SERVER_STATE", "SPARK_MASTER")
    }
    env.update(
        DAGSTER_HOME=str(home),
        LAKEHOUSE_ROOT=str(tmp_path / "lakehouse"),
        LANDING_ROOT=landing.root,
        SENSOR_INTERVAL_SECONDS="2",
    )
    log = tmp_path / "make-dev.log"
    dev = subprocess.Popen(
        [sys.executable, str(PROJECT_ROOT / "platform" / "dev.py"), "-h", "127.0.0.1"]
        + ["-p", str(port)],
        env=env,
        cwd=PROJECT_ROOT,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own group: the Ctrl-C below reaches it alone
        **popen,
    )
    return MakeDev(dev, f"http://127.0.0.1:{port}", home, log)


def wait_until_it_serves(dev: MakeDev, seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while not serves(dev.url, dev.home):
        assert dev.process.poll() is None, dev.log.read_text()[-3000:]
        assert time.monotonic() < deadline, "make dev did not come up"
        time.sleep(1)


def test_make_dev_serves_runs_from_the_long_lived_spark_and_ctrl_c_stops_both(
    tmp_path, write_visits, landing
):
    write_visits("2024-03-04", "part.jsonl", [_visit(i) for i in range(3)])
    started = start_make_dev(tmp_path, landing)
    dev, url, home = started.process, started.url, started.home
    server = SparkServer(server_state(home))
    try:
        wait_until_it_serves(started)
        deadline = time.monotonic() + 240
        spark = server.description()
        assert spark is not None and alive(spark.pid)

        launched = graphql(
            url,
            LAUNCH,
            {
                "params": {
                    "selector": {**LOCATION, "jobName": "visits_daily_job"},
                    "executionMetadata": {
                        "tags": [{"key": "dagster/partition", "value": "2024-03-04"}]
                    },
                }
            },
        )["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        run_id = launched["run"]["runId"]
        with dg.DagsterInstance.from_config(str(home)) as instance:
            while not instance.get_run_by_id(run_id).is_finished:
                assert time.monotonic() < deadline + 240, "the run did not finish"
                time.sleep(1)
            assert instance.get_run_by_id(run_id).is_success
            logs = "\n".join(r.user_message for r in instance.all_logs(run_id))
        # Attached: no JVM of its own, so no "Spark JVM output" of a boot in its log.
        assert "Spark JVM output" not in logs
        assert "2024-03-04: read (days 1, refused 0, files 1, lines_read 3" in logs
        # Nobody launches the day's sessions or its week: declarative automation does,
        # after the day of visits committed.
        with dg.DagsterInstance.from_config(str(home)) as instance:
            for asset in ("user_sessions", "visits_weekly"):
                built = None
                while built is None:
                    assert time.monotonic() < deadline + 480, f"automation built no {asset}"
                    time.sleep(1)
                    built = instance.get_latest_materialization_event(dg.AssetKey(asset))
                assert built.asset_materialization.partition == "2024-03-04", asset
                while not instance.get_run_by_id(built.run_id).is_finished:
                    assert time.monotonic() < deadline + 600, f"the {asset} run did not finish"
                    time.sleep(1)
                run = instance.get_run_by_id(built.run_id)
                assert run.tags["dagster/from_automation_condition"] == "true", asset
                assert run.is_success, asset
    finally:
        os.killpg(dev.pid, signal.SIGINT)
        dev.wait(timeout=120)
    assert not alive(spark.pid)
    assert server.description() is None
    assert "Stopped the long-lived Spark" in started.log.read_text()


def test_a_kill_of_make_dev_started_with_ctrl_c_ignored_stops_every_process(tmp_path, landing):
    """A shell that runs `make dev &` (a script, nohup) starts it with SIGINT ignored,
    and `dagster dev` inherited that: the SIGINT a `kill` of make dev passes on was lost,
    and make dev, killing `dagster dev` after its wait, left the webserver, daemon and
    code servers running with the UI's port held."""
    started = start_make_dev(
        tmp_path, landing, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)
    )
    server = SparkServer(server_state(started.home))
    try:
        wait_until_it_serves(started)
        spark = server.description()
        assert spark is not None
        started.process.terminate()
        # Within make dev's own wait (60 s) before it kills `dagster dev`.
        started.process.wait(timeout=50)
    finally:
        if started.process.poll() is None:
            os.killpg(started.process.pid, signal.SIGKILL)
    assert group_gone(started.process.pid, within=15), "a process of make dev's group is left"
    assert not serves(started.url, started.home)
    assert not alive(spark.pid)
    assert "Dagster services shut down" in started.log.read_text()


def group_gone(group: int, *, within: float) -> bool:
    """Whether every process of the process group `group` exits within `within` s (code
    servers finish their shutdown a moment after `dagster dev`)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.5)
    return False


def _visit(i: int) -> dict:
    return {
        "visit_id": f"v{i}",
        "user_id": "u1",
        "event_time": f"2024-03-04T1{i}:00:00Z",
        "page": "/home",
    }
