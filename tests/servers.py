"""Servers tests need, started on 127.0.0.1 and stopped by their pids, also when a test
fails: an S3-compatible object store (moto's server), a PostgreSQL server (the binaries
of the `pgserver` wheel), a Spark standalone cluster, a Spark Connect server, and the
production profile (`make stack`) with all of them."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import boto3
import psutil

from demo.servers import postgres, stop, wait_for_port

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CLUSTER_SCRIPT = PROJECT_ROOT / "platform" / "spark_cluster.py"
ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def s3_client(endpoint: str):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
    )


def s3_storage(endpoint: str):
    """The lakehouse's and landing zone's settings for the S3 server at `endpoint`."""
    from resources.object_store import ClientConfig, S3Config, S3Storage

    return S3Storage(
        s3=S3Config(
            endpoint=endpoint, access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY, region=REGION
        ),
        client=ClientConfig(allow_http=True),
    )


def create_bucket(endpoint: str, bucket: str) -> None:
    s3_client(endpoint).create_bucket(Bucket=bucket)


def notify_queue(endpoint: str, bucket: str) -> str:
    """A fresh SQS queue of the moto server that the bucket's event notifications (objects
    created and removed) go to; returns its URL."""
    queue = boto3.client(
        "sqs",
        endpoint_url=endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
    )
    url = queue.create_queue(QueueName=f"{bucket}-events")["QueueUrl"]
    arn = queue.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    to_queue = {
        "QueueArn": arn["Attributes"]["QueueArn"],
        "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"],
    }
    s3_client(endpoint).put_bucket_notification_configuration(
        Bucket=bucket,
        NotificationConfiguration={"QueueConfigurations": [to_queue]},
    )
    return url


@contextmanager
def postgres_server() -> Iterator[str]:
    """A PostgreSQL server on a free loopback port, its data in a fresh folder that goes
    with it (`demo/servers.py`); yields its URL."""
    data = Path(tempfile.mkdtemp(prefix="postgres-"))
    try:
        with postgres(data, free_port(), settings={"fsync": "off"}) as url:
            yield url
    finally:
        shutil.rmtree(data, ignore_errors=True)


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


@contextmanager
def production_stack(**env: str) -> Iterator[dict[str, str]]:
    """The production profile (`platform/stack.py up`, what `make stack` runs) in a fresh
    state folder; yields the variables it wrote (its `env` file). On the way out `down`
    stops it, however the test ended; after a test that passed, nothing it started runs,
    and its folder (its servers' data and logs, a gigabyte) is gone; after one that
    failed, the folder stays for its logs."""
    state = Path(tempfile.mkdtemp(prefix="stack-"))
    state.chmod(0o755)  # Postgres runs as `nobody` under root: it must reach its folder
    stack = [sys.executable, "-u", "platform/stack.py"]
    up = subprocess.Popen(
        [*stack, "up", "--state", str(state)],
        cwd=PROJECT_ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    said: list[str] = []
    try:
        assert up.stdout is not None
        for line in up.stdout:
            said.append(line)
            if line.startswith("  logs:"):
                break
        assert any("production profile is up" in line for line in said), "".join(said)
        # Its processes: what `up` started, and the cluster's daemons (detached from it).
        cluster = json.loads((state / "spark" / "cluster.json").read_text())["pids"]
        processes = psutil.Process(up.pid).children(recursive=True)
        processes += [psutil.Process(pid) for pid in cluster]
        lines = (state / "env").read_text().splitlines()
        yield dict(line.removeprefix("export ").split("=", 1) for line in lines)
    finally:
        subprocess.run([*stack, "down", "--state", str(state)], cwd=PROJECT_ROOT, timeout=300)
        up.wait(60)
    assert up.returncode == 0, "".join(said) + (up.stdout.read() if up.stdout else "")
    assert not [p.pid for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    shutil.rmtree(state)
