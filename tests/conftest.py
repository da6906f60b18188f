"""Shared fixtures: one Spark session per test session; a fresh lakehouse root, landing
zone and Dagster instance per test. Everything is real: Spark, Delta tables on disk,
Dagster instances."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import dagster as dg
import pytest
from support import DELTA_JARS

from resources import Lakehouse, LandingZone, SparkResource


def spark_resource() -> SparkResource:
    return SparkResource(master="local[2]", shuffle_partitions=2, delta_jars=DELTA_JARS)


@pytest.fixture(scope="session")
def spark_session():
    session = spark_resource().session()
    yield session
    session.stop()


@pytest.fixture
def spark(spark_session) -> SparkResource:
    # A resource like any run gets; its session() finds the shared running session.
    return spark_resource()


ENGINES = ["delta-rs", pytest.param("delta-spark", marks=pytest.mark.delta_spark)]


@pytest.fixture(params=ENGINES)
def engine(request) -> str:
    """Every test that touches the lakehouse runs once per Delta engine."""
    return request.param


@pytest.fixture
def lakehouse(tmp_path: Path, spark: SparkResource, engine: str) -> Lakehouse:
    return Lakehouse(root=str(tmp_path / "lakehouse"), engine=engine, spark=spark)


@pytest.fixture
def landing(tmp_path: Path) -> LandingZone:
    root = tmp_path / "landing"
    root.mkdir()
    return LandingZone(root=str(root))


@pytest.fixture
def resources(spark: SparkResource, lakehouse: Lakehouse, landing: LandingZone) -> dict:
    return {"spark": spark, "lakehouse": lakehouse, "landing": landing}


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as instance:
        yield instance


@pytest.fixture
def write_visits(landing: LandingZone) -> Callable[..., Path]:
    """Write visits as a JSONL file under visits/date=<day>/<name>; returns its path."""

    def write(day: dt.date | str, name: str, visits: list[dict] | str) -> Path:
        folder = Path(landing.root) / "visits" / f"date={day}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / name
        body = visits if isinstance(visits, str) else "".join(json.dumps(v) + "\n" for v in visits)
        path.write_text(body, encoding="utf-8")
        return path

    return write
