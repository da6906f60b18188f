"""The demo's pipelines, unchanged, on the deployments a user grows into: a Spark
standalone cluster with the delta-spark engine, an S3 object store with each engine, a
long-lived Spark (Spark Connect) writing to the object store, and the production profile
(`make stack`: all of them, with Postgres and Dagster's own processes).
Each prints the same content checksums and telemetry totals as the embedded default, which
runs beside a `dagster dev` already up on its instance, as `make demo` beside `make dev`:
the demo hands its files to that one's sensors, and no work is done twice.

Slow: every deployment runs the whole demo in its own process (`make test-slow`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import servers
from support import instance_home

from demo.dagster_dev import dagster_dev, graphql
from demo.dates import PIN, default_start

PROJECT_ROOT = Path(__file__).resolve().parent.parent

# Each test runs the whole demo in a process of its own (a few minutes on 2 cores).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

# Report lines that state what the tables hold (not versions, run ids or timings).
RUNS = "query { runsOrError { ... on Runs { results { status tags { key value } } } } }"
_RESULT_LINE = re.compile(r"content checksum|Running totals exact|^\s+\S.*\d+/\d+/\d+")
_SNAPSHOT_RUN = re.compile(r"run=[0-9a-f-]{36}")
# Every deployment's demo lands the same days, even when the runs straddle midnight.
DEMO_START = default_start().isoformat()


def demo_environment(workdir: Path, **env: str) -> dict[str, str]:
    """A fresh instance, lakehouse and landing zone under `workdir`."""
    home = instance_home(workdir / "dagster")
    return {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "LAKEHOUSE_ROOT": str(workdir / "lakehouse"),
        "LANDING_ROOT": str(workdir / "landing"),
        PIN: DEMO_START,
        **env,
    }


def run_demo(workdir: Path, *, environment: dict[str, str] | None = None, **env: str) -> str:
    """`python -m demo` (what `make demo` runs), on a fresh instance unless given one's
    environment; its report."""
    done = subprocess.run(
        [sys.executable, "-u", "-m", "demo"],
        cwd=PROJECT_ROOT,
        env=environment or demo_environment(workdir, **env),
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done.stdout


def results(report: str) -> list[str]:
    # The snapshot's table is named by the run that wrote it, different in each deployment.
    lines = [
        _SNAPSHOT_RUN.sub("run=<id>", line.strip())
        for line in report.splitlines()
        if _RESULT_LINE.search(line)
    ]
    assert any("content checksum" in line for line in lines), report[-4000:]
    return lines


@pytest.fixture(scope="module")
def embedded_default(tmp_path_factory) -> list[str]:
    """The demo beside a `dagster dev` already up on its instance (`make dev`)."""
    workdir = tmp_path_factory.mktemp("embedded")
    environment = demo_environment(workdir)
    log = workdir / "dev.log"
    with dagster_dev(PROJECT_ROOT, environment=environment, log=log) as url:
        report = run_demo(workdir, environment={**environment, "DAGSTER_WEBSERVER_URL": url})
        assert f"Dagster:          {url} (the `make dev` already up does the work)" in report
        runs = graphql(url, RUNS)["runsOrError"]["results"]
    tags = [{tag["key"]: tag["value"] for tag in run["tags"]} for run in runs]
    # Every run the sensors launched, launched once: the demo ran none of their work.
    keys = [run_tags["dagster/run_key"] for run_tags in tags if "dagster/run_key" in run_tags]
    assert len(keys) == len(set(keys)) > 10
    by_sensor = [
        (run["status"], run_tags["dagster/sensor_name"])
        for run, run_tags in zip(runs, tags, strict=True)
        if "dagster/sensor_name" in run_tags
    ]
    # The file sensors launch the ingestion; the automation sensor then brings the assets
    # that follow them (user_sessions, visits_weekly) up to date.
    assert {sensor for _, sensor in by_sensor} == {
        "lakehouse_automation",
        "visits_late_files",
        "telemetry_files",
        "change_files",
        "event_batch_files",
        "enriched_run_directories",
    }
    assert {status for status, _ in by_sensor} == {"SUCCESS"}
    return results(report)


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
    assert results(on_cluster) == embedded_default


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
        **servers.s3_environment(s3_endpoint),
    )
    assert results(on_s3) == embedded_default


def test_the_demo_on_the_production_profile_matches_the_embedded_default(embedded_default):
    """`make stack`, then `make stack-demo`: every source lands in the stack's bucket, its
    sensors and daemon launch the runs, the cluster runs them, the tables go to its object
    store, the instance and the catalog live in its Postgres; `down` leaves nothing."""
    with servers.production_stack(SENSOR_INTERVAL_SECONDS="5") as env:
        assert env["LANDING_ROOT"].startswith("s3://") and "DAGSTER_WEBSERVER_URL" in env
        on_stack = run_demo(Path(), environment={**os.environ, **env, PIN: DEMO_START})
    assert "(the `make dev` already up does the work)" in on_stack
    assert results(on_stack) == embedded_default


def test_the_demo_through_spark_connect_on_an_object_store_matches_the_embedded_default(
    tmp_path, s3_endpoint, embedded_default
):
    """Runs attached to a long-lived Spark (SPARK_REMOTE): the server holds the S3
    settings it was started with, the run process no JVM."""
    s3 = servers.s3_environment(s3_endpoint)
    bucket = f"demo-{uuid.uuid4().hex[:12]}"
    servers.create_bucket(s3_endpoint, bucket)
    with servers.spark_processes("connect", tmp_path / "connect", s3) as exports:
        through_connect = run_demo(
            tmp_path / "run",
            LAKEHOUSE_ROOT=f"s3://{bucket}/lakehouse",
            LAKEHOUSE_ENGINE="delta-spark",
            SPARK_REMOTE=exports["SPARK_REMOTE"],
            **s3,
        )
    assert results(through_connect) == embedded_default
