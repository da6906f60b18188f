"""The demo's pipelines, unchanged, on the deployments a user grows into: a Spark
standalone cluster with the delta-spark engine, and an S3 object store with each engine.
Each prints the same content checksums and telemetry totals as the embedded default.

Slow: every deployment runs the whole demo in its own process (`make test-slow`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import servers

PROJECT_ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow

# Report lines that state what the tables hold (not versions, run ids or timings).
_RESULT_LINE = re.compile(r"content checksum|Running totals exact|^\s+\S.*\d+/\d+/\d+")


def run_demo(workdir: Path, **env: str) -> list[str]:
    """`python -m demo` (what `make demo` runs) on a fresh instance; its result lines."""
    home = workdir / "dagster"
    home.mkdir(parents=True)
    shutil.copy(PROJECT_ROOT / "platform" / "dagster.yaml", home / "dagster.yaml")
    environment = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "LAKEHOUSE_ROOT": str(workdir / "lakehouse"),
        "LANDING_ROOT": str(workdir / "landing"),
        **env,
    }
    done = subprocess.run(
        [sys.executable, "-u", "-m", "demo"],
        cwd=PROJECT_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    lines = [line.strip() for line in done.stdout.splitlines() if _RESULT_LINE.search(line)]
    assert any("content checksum" in line for line in lines), done.stdout[-4000:]
    return lines


@pytest.fixture(scope="module")
def embedded_default(tmp_path_factory) -> list[str]:
    return run_demo(tmp_path_factory.mktemp("embedded"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A standalone master and two workers, stopped by their pids even if a test fails."""
    with servers.spark_processes("up", tmp_path_factory.mktemp("spark-cluster")) as exports:
        yield exports


def test_the_demo_on_a_standalone_cluster_matches_the_embedded_default(
    tmp_path, cluster, embedded_default
):
    assert cluster["SPARK_MASTER"].startswith("spark://127.0.0.1:")
    on_cluster = run_demo(
        tmp_path, SPARK_MASTER=cluster["SPARK_MASTER"], LAKEHOUSE_ENGINE="delta-spark"
    )
    assert on_cluster == embedded_default


@pytest.mark.parametrize("engine", ["delta-rs", "delta-spark"])
def test_the_demo_on_an_object_store_matches_the_embedded_default(
    tmp_path, engine, s3_endpoint, embedded_default
):
    bucket = f"demo-{uuid.uuid4().hex[:12]}"
    servers.create_bucket(s3_endpoint, bucket)
    on_s3 = run_demo(
        tmp_path,
        LAKEHOUSE_ROOT=f"s3://{bucket}/lakehouse",
        LAKEHOUSE_ENGINE=engine,
        AWS_ENDPOINT_URL=s3_endpoint,
        AWS_ACCESS_KEY_ID=servers.ACCESS_KEY,
        AWS_SECRET_ACCESS_KEY=servers.SECRET_KEY,
        AWS_REGION=servers.REGION,
        AWS_ALLOW_HTTP="true",
    )
    assert on_s3 == embedded_default
