"""The long-lived Spark of `make dev` and `make demo` (resources/spark_server.py): a real
Spark Connect server from pyspark's own distribution, reused while it answers, started
again by the run that finds it dead, and stopped by its pid by whoever started it.

The clients run in processes of their own: this test process may already hold a classic
Spark session, and a process holds a Connect session or a classic one, never both."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from resources.catalog import beeline
from resources.spark_server import (
    ServerDescription,
    SparkServer,
    SparkServerError,
    alive,
    answers,
    long_lived_spark,
)

PROJECT_ROOT = Path(__file__).resolve().parents[2]
ATTACH = """
import sys
from resources.spark import SparkResource
spark = SparkResource(remote=sys.argv[1], server_state=sys.argv[2])
print("rows", spark.session().range(7).count())
"""


def attach(remote: str, state: str) -> subprocess.CompletedProcess:
    """A run's Spark resource attaching to `remote` and counting rows there, with the
    environment a run under `make dev` has."""
    return subprocess.run(
        [sys.executable, "-c", ATTACH, remote, state],
        cwd=PROJECT_ROOT,
        env={**os.environ, "SPARK_REMOTE": remote, "SPARK_SERVER_STATE": state},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_long_lived_spark_is_reused_and_stopped_by_its_starter(started_spark):
    """The session's long-lived Spark (`started_spark`, which the catalog and run-process
    tests share) as its starter made it; its stop by its starter's pid is checked when the
    session ends, by the fixture."""
    state, env, said = started_spark.state, started_spark.variables, started_spark.said
    first = SparkServer(state).description()
    assert first is not None
    assert env == {"SPARK_REMOTE": first.remote, "SPARK_SERVER_STATE": str(state)}
    assert first.remote.startswith("sc://127.0.0.1:") and first.owner == os.getpid()
    assert "long-lived Spark Connect" in said[0] and first.log in said[0]
    assert said[1].startswith("SQL (JDBC):       jdbc:hive2://127.0.0.1:")
    assert first.jdbc in said[1] and answers("127.0.0.1", first.jdbc_port)
    # Its catalog's schema answers over JDBC, with or without tables in it.
    command, shell_env = beeline(first.jdbc, "-e", "SHOW TABLES")
    shown = subprocess.run(command, env=shell_env, capture_output=True, timeout=300)
    assert shown.returncode == 0

    # A second `make demo` beside it reuses it and leaves it running on its way out.
    before = len(said)
    with long_lived_spark(state, {}, say=said.append) as again:
        assert again == env
    assert "already up" in said[before] and first.jdbc in said[before + 1]
    assert len(said) == before + 2
    assert alive(first.pid) and SparkServer(state).description() == first
    assert "rows 7" in attach(env["SPARK_REMOTE"], str(state)).stdout


@pytest.mark.slow  # fault injection: a second JVM boot after the first is killed
def test_a_run_that_finds_the_long_lived_spark_dead_starts_it_again(tmp_path):
    state = tmp_path / "spark" / "connect"
    said = []
    with long_lived_spark(state, {}, say=said.append) as env:
        first = SparkServer(state).description()
        assert "rows 7" in attach(env["SPARK_REMOTE"], str(state)).stdout
        # After the server dies, the next run starts a new one on the same port (the URL
        # every run was given) with one line, not a gRPC traceback.
        os.killpg(first.pid, signal.SIGKILL)
        revived = attach(env["SPARK_REMOTE"], str(state))
        assert revived.returncode == 0, revived.stderr[-3000:]
        assert "rows 7" in revived.stdout
        assert f"The long-lived Spark at {first.remote} is not answering" in revived.stdout
        second = SparkServer(state).description()
        assert second.pid != first.pid and second.port == first.port
        assert second.jdbc == first.jdbc  # the JDBC URL given out stays right too
        assert second.owner == os.getpid()  # still the starter's to stop

    assert not alive(second.pid)
    assert SparkServer(state).description() is None
    assert "Stopped the long-lived Spark" in said[-1]


def test_a_users_spark_wins_and_nothing_is_started(tmp_path):
    said = []
    for chosen in (
        {"SPARK_REMOTE": "sc://spark.example:15002"},
        {"SPARK_MASTER": "spark://m:7077"},
    ):
        with long_lived_spark(tmp_path, chosen, say=said.append) as env:
            assert env == {}
    assert not (tmp_path / "server.json").exists()
    assert all("nothing started" in line for line in said)


def test_a_users_remote_that_does_not_answer_is_named_without_a_traceback(tmp_path):
    with socket_port() as port:
        done = attach(f"sc://127.0.0.1:{port}", "")
    assert done.returncode != 0
    assert f"no Spark Connect server answers at sc://127.0.0.1:{port}" in done.stderr
    assert "unset SPARK_REMOTE" in done.stderr


def test_a_port_taken_by_another_process_is_refused_by_name(tmp_path):
    server = SparkServer(tmp_path)
    with socket_port(listening=True) as port, pytest.raises(SparkServerError, match=f"{port}"):
        server.ensure(port=port, config={})
    assert server.description() is None


def test_an_orphaned_server_is_the_next_starters_to_stop(tmp_path):
    """A server whose starter exited without stopping it (a demo killed beside `make dev`)
    is stopped by the next `long_lived_spark` on its way out; one kept by `make
    spark-connect` (owner 0) is not orphaned."""
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], text=True, capture_output=True
    ).stdout.strip()
    described = ServerDescription("sc://127.0.0.1:1", 1, 1, "local[*]", "log", int(gone))
    assert described.orphaned
    assert not ServerDescription("sc://127.0.0.1:1", 1, 1, "local[*]", "log", 0).orphaned
    assert not ServerDescription("sc://127.0.0.1:1", 1, 1, "local[*]", "log", os.getpid()).orphaned


class socket_port:
    """A loopback port: free (nothing listens), or held by a listening socket."""

    def __init__(self, *, listening: bool = False) -> None:
        import socket

        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.listening = listening

    def __enter__(self) -> int:
        port = self.socket.getsockname()[1]
        if self.listening:
            self.socket.listen()
        else:
            self.socket.close()
            deadline = time.monotonic() + 5
            while answers("127.0.0.1", port) and time.monotonic() < deadline:
                time.sleep(0.1)
        return port

    def __exit__(self, *exc) -> None:
        self.socket.close()


@pytest.mark.slow
def test_servers_of_two_folders_started_at_once_each_get_a_port_of_their_own(tmp_path):
    """Two deployments (or two test processes) starting their long-lived Spark at the same
    moment: until one answers, its port looks free to the other, which must still not
    pick it and take the first one's server for its own (then lose it when its owner
    stops it)."""
    servers = [SparkServer(tmp_path / name) for name in ("a", "b")]
    with ThreadPoolExecutor(2) as pool:
        started = list(pool.map(lambda server: server.ensure(config={})[0], servers))
    try:
        assert started[0].port != started[1].port
        for server, described in zip(servers, started, strict=True):
            assert server.running() == described
            assert "rows 7" in attach(described.remote, str(server.state)).stdout
    finally:
        for server in servers:
            server.stop()
    assert not any(alive(described.pid) for described in started)
