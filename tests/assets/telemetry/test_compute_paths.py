"""Both places telemetry can compute (TelemetrySettings.compute) give the same tables, bit
for bit: the same deliveries (late, duplicated, appended, half-written, rewritten,
broken, too late), materialized on the embedded path and on Spark, leave every table
with the same schema, the same rows with the same values, and the same versions."""

from __future__ import annotations

import datetime as dt
import random

import dagster as dg
import pyarrow as pa
import pytest
from telemetry_deployment import Deployment
from telemetry_history import (
    START,
    ReportFile,
    expected_hourly,
    expected_totals,
    history,
    report,
    shuffled,
)

from assets.telemetry import TelemetrySettings, control
from resources import Lakehouse, LandingZone

SUBJECTS = ["Tool01", 'Tool 02 "west"']
FILES = history(SUBJECTS, files_per_subject=6, rows_per_file=40)
# Not compared: each path's own runs (their ids, when they saw a file, when a retry is due).
OWN_RUNS = {"last_seen", "next_attempt_at", "event_time", "quarantined_at", "dagster_run_id"}


@pytest.fixture(params=["delta-rs"])
def engine(request) -> str:
    # The deployment's engine is delta-rs: the embedded path writes through it, the Spark
    # path through delta-spark (TelemetrySettings.compute decides, not the engine).
    return request.param


@pytest.fixture(params=["local", "s3"])
def landing(request, tmp_path) -> LandingZone:
    """The files on a local disk, and in a bucket (read with ranged requests there)."""
    if request.param == "s3":
        return request.getfixturevalue("s3_landing")
    (tmp_path / "landing").mkdir()
    return LandingZone(root=str(tmp_path / "landing"))


def _deployments(tmp_path, spark, landing) -> dict[str, Deployment]:
    deployments = {}
    for compute in ("embedded", "spark"):
        lakehouse = Lakehouse(root=str(tmp_path / compute), engine="delta-rs", spark=spark)
        settings = TelemetrySettings(compute=compute, lateness_horizon_hours=48)
        instance = dg.DagsterInstance.ephemeral()
        deployments[compute] = Deployment(instance, lakehouse, landing, settings)
    return deployments


def _table(lakehouse: Lakehouse, table: str) -> tuple[pa.Schema, list[tuple]]:
    rows = lakehouse.read_arrow(table)
    kept = [name for name in rows.schema.names if name not in OWN_RUNS]
    return rows.schema, sorted(
        tuple(r[name] for name in kept) for r in rows.select(kept).to_pylist()
    )


def test_the_embedded_and_the_spark_paths_write_the_same_tables(tmp_path, spark, landing):
    paths = _deployments(tmp_path, spark, landing)
    rng = random.Random(7)
    order = shuffled(FILES, seed=5)
    growing = report("Tool01", START + dt.timedelta(hours=30), 300, rng)
    broken = report('Tool 02 "west"', START + dt.timedelta(hours=2), 20, rng)
    too_late = report("Tool01", START - dt.timedelta(days=3), 10, rng)
    rewritten = ReportFile(
        order[0].subject, order[0].name, report(order[0].subject, START, 35, rng).rows
    )
    cut = growing.content.index(b"\n", len(growing.content) // 2) + 1
    waves: list[list[tuple[str, bytes]]] = [
        [(f.path, f.content) for f in order[:5]],
        # Duplicated and late; a file half-written; a broken file.
        [(f.path, f.content) for f in order[3:9]]
        + [(growing.path, growing.content[:cut] + b"2024-05-01T0")]
        + [(broken.path, broken.content.replace(b",", b";", 3))],
        # The rest; the file grows; the broken one rewritten right; one far too late.
        [(f.path, f.content) for f in order[9:]]
        + [(growing.path, growing.content), (broken.path, broken.content)]
        + [(too_late.path, too_late.content)],
        # A delivered file rewritten with other rows.
        [(rewritten.path, rewritten.content)],
    ]
    for wave in waves:
        for path, content in wave:
            paths["embedded"].write(path, content)
        for deployment in paths.values():
            for subject in SUBJECTS:
                deployment.materialize(subject)

    embedded, on_spark = paths["embedded"].lakehouse, paths["spark"].lakehouse
    for table in control.SCHEMAS:  # every telemetry table
        assert on_spark.exists(table) == embedded.exists(table), table
        if embedded.exists(table):
            assert _table(on_spark, table) == _table(embedded, table), table
            assert on_spark.version(table) == embedded.version(table), table
    # The Spark path's rows were written by Spark (its metrics' names), the embedded
    # path's by delta-rs.
    for table in (control.RAW, control.WITHIN_HOUR):
        (spark_commit,) = on_spark.history(table, limit=1)
        (embedded_commit,) = embedded.history(table, limit=1)
        assert "numOutputRows" in spark_commit.engine_metrics
        assert "numOutputRows" not in embedded_commit.engine_metrics
    # And both are right: what an oracle computes from the files as they now are.
    states = paths["spark"].states()
    assert states[too_late.path].status == "quarantined"
    assert states[broken.path].status == "ingested"
    final = [f for f in FILES if f.path != rewritten.path] + [rewritten, growing, broken]
    for deployment in paths.values():
        assert deployment.totals() == expected_totals(final)
        assert deployment.hourly() == expected_hourly(final)
