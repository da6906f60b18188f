"""The production profile (`make stack`, platform/stack.py) as a user brings it up: the
instance is on Postgres, a visits day landed in the bucket reaches its table in the object store
through the sensor, the daemon and a run attached to the long-lived Spark on the
cluster, and `down` leaves nothing of it running. Every source on it, the demo's whole
story: tests/test_deployments.py."""

from __future__ import annotations

import datetime as dt
import json
import time

import boto3
import dagster as dg
import pytest
import servers
from support import day_of_visits

DAY = dt.date(2024, 5, 1)


@pytest.mark.slow
def test_the_production_profile_comes_up_runs_a_day_and_goes_down(monkeypatch):
    with servers.production_stack(SENSOR_INTERVAL_SECONDS="5") as env:
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
