"""Servers tests need, started on 127.0.0.1 and stopped by their pids, also when a test
fails: an S3-compatible object store (moto's server), a PostgreSQL server (the binaries
of the `pgserver` wheel), a Spark standalone cluster, a Spark Connect server."""

from __future__ import annotations

import importlib.util
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import boto3
import psycopg2

CLUSTER_SCRIPT = Path(__file__).resolve().parent.parent / "platform" / "spark_cluster.py"
ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen, *, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server process {process.pid} exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def s3_server() -> Iterator[str]:
    """moto's S3 server on a free loopback port; yields its endpoint URL."""
    port = free_port()
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(process)


def s3_environment(endpoint: str) -> dict[str, str]:
    """The AWS_* variables a run (or a Spark server) reads to reach the moto server."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_REGION": REGION,
        "AWS_ALLOW_HTTP": "true",
    }


def create_bucket(endpoint: str, bucket: str) -> None:
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
    )
    client.create_bucket(Bucket=bucket)


def _postgres_bin() -> Path:
    """PostgreSQL's own binaries, shipped in the `pgserver` wheel (its Python module,
    which would create system users and change folder modes when run as root, is not
    used)."""
    spec = importlib.util.find_spec("pgserver")
    assert spec is not None and spec.submodule_search_locations, "pgserver is not installed"
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


@contextmanager
def postgres_server() -> Iterator[str]:
    """A PostgreSQL server on a free loopback port, its data in a fresh folder (trust
    authentication, TCP only); yields its URL. PostgreSQL refuses to run as root, so as
    root the server runs as `nobody`, in a folder `nobody` owns."""
    binaries = _postgres_bin()
    data = Path(tempfile.mkdtemp(prefix="postgres-"))
    as_user: dict[str, int] = {}
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        os.chown(data, nobody.pw_uid, nobody.pw_gid)
        as_user = {"user": nobody.pw_uid, "group": nobody.pw_gid}
        # `nobody` may not reach the project's folder (a clone under a 0700 directory):
        # its own copy of the wheel's PostgreSQL, inside the folder it owns, laid out as
        # in site-packages (the binaries find their libraries at ../../../pgserver.libs).
        site = binaries.parents[2]
        shutil.copytree(site / "pgserver.libs", data / "pgserver.libs")
        binaries = Path(shutil.copytree(binaries.parent, data / "pgserver" / "pginstall")) / "bin"
    process = None
    try:
        subprocess.run(
            [binaries / "initdb", "-D", data / "db", "-U", "postgres", "--auth=trust"],
            check=True,
            capture_output=True,
            cwd=data,
            **as_user,
        )
        port = free_port()
        log = (data / "server.log").open("w")
        process = subprocess.Popen(
            [binaries / "postgres", "-D", data / "db", "-h", "127.0.0.1", "-p", str(port)]
            + ["-c", "unix_socket_directories=", "-c", "fsync=off"],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=data,
            **as_user,
        )
        wait_for_port(port, process)
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)  # PostgreSQL's fast shutdown
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(data, ignore_errors=True)


@contextmanager
def postgres_connection(url: str) -> Iterator[psycopg2.extensions.connection]:
    """A connection in autocommit mode (`CREATE DATABASE` runs outside transactions)."""
    connection = psycopg2.connect(url)
    connection.autocommit = True
    try:
        yield connection
    finally:
        connection.close()


@contextmanager
def spark_processes(
    command: str, state: Path, env: dict[str, str] | None = None
) -> Iterator[dict[str, str]]:
    """`platform/spark_cluster.py <command>` (`up`: a standalone cluster, `connect`: a
    Spark Connect server); yields the variables it says to export. `down` stops them by
    their pids on the way out, also when the test failed."""
    script = [sys.executable, str(CLUSTER_SCRIPT)]
    try:
        started = subprocess.run(
            [*script, command, "--state", str(state)],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, **(env or {})},
        )
        assert started.returncode == 0, started.stdout + started.stderr
        yield dict(re.findall(r"export (\w+)=(\S+)", started.stdout))
    finally:
        subprocess.run([*script, "down", "--state", str(state)], timeout=120, check=True)
