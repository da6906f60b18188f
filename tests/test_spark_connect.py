"""Attaching to a long-lived Spark: a Spark Connect server started from pyspark's own
jars (`platform/spark_cluster.py connect`, what `make spark-connect` runs), and the Delta
port's whole contract on the delta-spark engine through it. The engine speaks only Delta
SQL and DataFrame writes, the surface Spark Connect carries.

Slow: a server JVM plus a second test process (a process holds a Connect session or a
classic one, never both)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import partition_writer
import pytest
import servers

from resources.object_store import S3Lakehouse

PROJECT_ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def spark_remote(tmp_path_factory, s3_endpoint):
    """The server's `sc://` URL; it is stopped by its pid even if a test fails. It is
    started with the object store's AWS_* settings, as `make spark-connect` would be."""
    with servers.spark_processes(
        "connect", tmp_path_factory.mktemp("connect"), servers.s3_environment(s3_endpoint)
    ) as exports:
        yield exports["SPARK_REMOTE"]


def pytest_attached(remote: str, *args: str) -> str:
    """Tests run by pytest in a process of its own attached to `remote`; they must pass.
    Returns pytest's summary line."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *args, "-p", "no:randomly", "-q"],
        cwd=PROJECT_ROOT,
        env={**os.environ, "SPARK_REMOTE": remote},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stdout[-5000:]
    return done.stdout.strip().splitlines()[-1]


def test_the_port_contract_holds_through_spark_connect(spark_remote):
    assert spark_remote.startswith("sc://127.0.0.1:")
    summary = pytest_attached(
        spark_remote, "tests/resources/test_lakehouse_contract.py", "-k", "delta-spark"
    )
    # Every delta-spark half passes (the delta-rs halves are deselected), none skipped.
    assert re.fullmatch(r"(\d+) passed, \1 deselected in .*", summary), summary


def test_delta_spark_writer_processes_sharing_one_spark_lose_no_s3_commit(
    spark_remote, s3_endpoint, s3_storage, spark
):
    """delta-spark's S3 log store makes commits exclusive within one Spark driver: two
    writer processes attached to the one long-lived Spark race on one table and every
    commit lands."""
    bucket = f"race-{uuid.uuid4().hex[:12]}"
    servers.create_bucket(s3_endpoint, bucket)
    lake = S3Lakehouse(
        root=f"s3://{bucket}/lakehouse", engine="delta-rs", spark=spark, s3=s3_storage
    )
    partition_writer.race(lake, s3_endpoint, engine="delta-spark", remote=spark_remote)


def test_runs_side_by_side_in_one_process_each_keep_their_own_session(spark_remote):
    """Runs in one process (threads of `execute_in_process`, a test session) attached to
    the long-lived Spark: each has its own Connect session, which its teardown stops
    without pulling the session from under another run or the caller, and a checkpoint
    stays in the session that made it. Before, the runs shared the process's default
    session: concurrent days of payments failed with NO_ACTIVE_SESSION, and a vanished
    file surfaced as a gRPC error instead of naming the file."""
    summary = pytest_attached(
        spark_remote,
        "tests/assets/database/test_payments.py::"
        "test_concurrent_days_carrying_one_key_never_both_commit_it",
        "tests/assets/immutable/test_device_snapshot.py",
        "tests/assets/overwriting/test_data_overwrite.py::"
        "test_a_backfilled_range_is_one_run_with_a_commit_and_a_materialization_per_day",
        "tests/bad_input/test_visits.py",
    )
    assert re.fullmatch(r"\d+ passed in .*", summary), summary
