"""Spark's console output (JVM launcher warnings, log4j) stays out of the terminal of
whatever launched the run and goes to the run's log at WARN. A JVM starts once per
process, so a fresh process runs the asset."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from resources.spark_server import CLIENT_ONLY

PROJECT_ROOT = Path(__file__).resolve().parents[2]

RUN = """
import json, logging
import dagster as dg
from resources import SparkResource

@dg.asset
def numbers(spark: SparkResource) -> dg.MaterializeResult:
    rows = spark.session().range(5).count()
    return dg.MaterializeResult(metadata={"rows": rows})

quiet = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
with dg.instance_for_test() as instance:
    result = dg.materialize(
        [numbers], resources={"spark": SparkResource(master="local[1]")},
        instance=instance, run_config=quiet,
    )
    warnings = [
        record.user_message
        for record in instance.all_logs(result.run_id)
        if record.level == logging.WARNING
    ]
    print(json.dumps({"success": result.success, "warnings": warnings}))
"""


def test_the_jvm_output_goes_to_the_runs_log_not_the_terminal():
    done = subprocess.run(
        [sys.executable, "-c", RUN],
        cwd=PROJECT_ROOT,
        # A process with SPARK_REMOTE set gets a Connect session from pyspark whatever
        # the master: this run boots its own JVM even in a suite run attached to one.
        env={name: value for name, value in os.environ.items() if name not in CLIENT_ONLY},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["success"]
    # What the JVM says on every start: its launcher's warning and log4j's profile line.
    for noise in ("jdk.incubator.vector", "log4j"):
        assert noise not in done.stderr, done.stderr[-3000:]
    [forwarded] = [w for w in outcome["warnings"] if w.startswith("Spark JVM output")]
    assert "jdk.incubator.vector" in forwarded
    assert "log4j" in forwarded
