"""The production profile (`make stack`, platform/stack.py) as a user brings it up: the
instance is on Postgres, a visits day landed in the bucket reaches its table in the object store
through the sensor, the daemon and a run attached to the long-lived Spark on the
cluster, and `down` leaves nothing of it running."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import boto3
import dagster as dg
import psutil
import pytest
from support import PROJECT_ROOT, day_of_visits

DAY = dt.date(2024, 5, 1)


def _environment(state: Path) -> dict[str, str]:
    lines = (state / "env").read_text().splitlines()
    return dict(line.removeprefix("export ").split("=", 1) for line in lines)


@pytest.mark.slow
def test_the_production_profile_comes_up_runs_a_day_and_goes_down(monkeypatch):
    # Postgres runs as `nobody` under root: its folder must be one `nobody` may reach.
    state = Path(tempfile.mkdtemp(prefix="stack-"))
    state.chmod(0o755)
    stack = [sys.executable, "-u", "platform/stack.py"]
    up = subprocess.Popen(
        [*stack, "up", "--state", str(state)],
        cwd=PROJECT_ROOT,
        env={**os.environ, "SENSOR_INTERVAL_SECONDS": "5"},
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
        env = _environment(state)
        # Its processes: what `up` started, and the cluster's daemons (detached from it).
        cluster = json.loads((state / "spark" / "cluster.json").read_text())["pids"]
        processes = psutil.Process(up.pid).children(recursive=True)
        processes += [psutil.Process(pid) for pid in cluster]
        assert env["LANDING_ROOT"] == "s3://landing"
        boto3.client(
            "s3",
            endpoint_url=env["AWS_ENDPOINT_URL"],
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
            region_name=env["AWS_REGION"],
        ).put_object(
            Bucket="landing",
            Key=f"visits/date={DAY}/part-0.jsonl",
            Body="".join(json.dumps(v) + "\n" for v in day_of_visits(DAY, 20)).encode(),
        )
        for name, value in env.items():  # the instance reads its Postgres URL from them
            monkeypatch.setenv(name, value)
        with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
            assert type(instance.run_storage).__name__ == "PostgresRunStorage"
            day = dg.AssetRecordsFilter(
                asset_key=dg.AssetKey("visits_daily"), asset_partitions=[str(DAY)]
            )
            deadline = time.monotonic() + 300
            while not (records := instance.fetch_materializations(day, limit=1).records):
                assert time.monotonic() < deadline, "visits_daily was not materialized"
                time.sleep(2)
            metadata = records[0].asset_materialization.metadata
            assert metadata["table_uri"].value == "s3://lakehouse/visits_daily"
    finally:
        subprocess.run([*stack, "down", "--state", str(state)], cwd=PROJECT_ROOT, timeout=300)
        up.wait(60)
    assert up.returncode == 0, "".join(said) + up.stdout.read()
    assert not [p.pid for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
