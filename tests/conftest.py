"""Shared fixtures: one Spark session per test session; a fresh lakehouse root, landing
zone and Dagster instance per test. Everything is real: Spark, Delta tables on disk,
Dagster instances."""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest
import servers
from support import DELTA_JARS

from resources import Lakehouse, LandingZone, SparkResource
from resources.object_store import S3Lakehouse, S3Spark, S3Storage
from resources.spark_server import SparkServer, alive, long_lived_spark


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """One S3-compatible server (moto) for the test session."""
    with servers.s3_server() as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def s3_storage(s3_endpoint: str) -> S3Storage:
    return servers.s3_storage(s3_endpoint)


@pytest.fixture
def bucket(s3_endpoint: str) -> str:
    """A new, empty bucket of the session's S3 server."""
    name = f"landing-{uuid.uuid4().hex[:12]}"
    servers.create_bucket(s3_endpoint, name)
    return name


def spark_resource(s3_storage: S3Storage) -> SparkResource:
    if os.environ.get("SPARK_REMOTE"):
        # The suite attached to a long-lived Spark (tests/test_spark_connect.py): a
        # process holds either a Connect session or a classic one, never both.
        return SparkResource(remote=os.environ["SPARK_REMOTE"], shuffle_partitions=2)
    # The one session of the test run reaches the local disk and the S3 server alike.
    return S3Spark(
        master="local[2]",
        shuffle_partitions=2,
        delta_jars=DELTA_JARS,
        s3=s3_storage,
        extra_config=TINY_DATA,
    )


TINY_DATA = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}
"""The tests' data is a few rows: Spark evaluates their expressions without generating and
compiling Java for each new query first, which costs more than the rows (the suite runs
15% faster). Results are the same either way; runs keep Spark's default."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--through-connect",
        action="store_true",
        help="run the suite attached to a long-lived Spark (Spark Connect) that the session "
        "starts, the way runs under `make dev` reach Spark (`make test-connect`)",
    )


@pytest.fixture(scope="session")
def connect_server(request, tmp_path_factory, s3_endpoint: str) -> Iterator[dict[str, str]]:
    """With `--through-connect`: a Spark Connect server for the whole session, started with
    the object store's AWS_* settings (as `make spark-connect` would be) and stopped by
    its pid at the end; its SPARK_REMOTE and SPARK_SERVER_STATE are the session's, so
    every Spark resource and every run process attaches to it. Else nothing."""
    if not request.config.getoption("--through-connect"):
        yield {}
        return
    state = tmp_path_factory.mktemp("connect")
    with servers.spark_processes("connect", state, servers.s3_environment(s3_endpoint)) as exports:
        with pytest.MonkeyPatch.context() as patch:
            for name, value in exports.items():
                patch.setenv(name, value)
            yield exports


@dataclass(frozen=True)
class StartedSpark:
    """A long-lived Spark this test process started, as `make dev` starts one."""

    state: Path
    variables: dict[str, str]
    """SPARK_REMOTE and SPARK_SERVER_STATE, as run processes are given them."""
    said: list[str]
    """The lines `long_lived_spark` said, in order."""


@pytest.fixture(scope="session")
def started_spark(tmp_path_factory) -> Iterator[StartedSpark]:
    """The long-lived Spark `make dev` starts (a Spark Connect server), started once for
    the session when a test asks for it. Its starter stops it by its pid at the end, and
    the session's end checks that it did: the server is gone, and so is its state."""
    state = tmp_path_factory.mktemp("spark") / "connect"
    said: list[str] = []
    with long_lived_spark(state, {}, say=said.append) as variables:
        server = SparkServer(state).description()
        assert server is not None
        yield StartedSpark(state, variables, said)
    assert not alive(server.pid), f"the long-lived Spark {server.pid} outlived its starter"
    assert SparkServer(state).description() is None
    assert "Stopped the long-lived Spark" in said[-1]


@pytest.fixture(scope="session")
def spark_remote(request, connect_server) -> dict[str, str]:
    """The long-lived Spark for tests that launch run processes: they give the runs these
    variables, and the runs attach to it as they do under `make dev`, instead of booting
    a JVM each. A suite run attached to a long-lived Spark (SPARK_REMOTE) gives them that
    one; otherwise it is `started_spark`."""
    if os.environ.get("SPARK_REMOTE"):
        return {
            name: os.environ[name]
            for name in ("SPARK_REMOTE", "SPARK_SERVER_STATE")
            if name in os.environ
        }
    return request.getfixturevalue("started_spark").variables


@pytest.fixture(scope="session")
def spark_session(s3_storage: S3Storage, connect_server):
    session = spark_resource(s3_storage).session()
    yield session
    session.stop()


@pytest.fixture
def spark(s3_storage: S3Storage, spark_session) -> SparkResource:
    # A resource like any run gets; its session() finds the shared running session.
    return spark_resource(s3_storage)


ENGINES = ["delta-rs", pytest.param("delta-spark", marks=pytest.mark.delta_spark)]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that launch several run processes at once boot a JVM in each with delta-spark
    (one to two minutes on 2 cores), and long scenarios whose engine operations the port's
    contract tests already cover on delta-spark: their delta-spark half runs in
    `make test-slow`, the delta-rs half in `make test`."""
    for item in items:
        long_on_spark = item.get_closest_marker("run_processes") or item.get_closest_marker(
            "long_on_delta_spark"
        )
        if long_on_spark and item.get_closest_marker("delta_spark"):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(params=ENGINES)
def engine(request) -> str:
    """Every test that touches the lakehouse runs once per Delta engine."""
    return request.param


@pytest.fixture
def lakehouse(tmp_path: Path, spark: SparkResource, engine: str) -> Lakehouse:
    return Lakehouse(root=str(tmp_path / "lakehouse"), engine=engine, spark=spark)


@pytest.fixture
def s3_lakehouse(
    request, spark: SparkResource, engine: str, s3_endpoint: str, s3_storage: S3Storage
) -> Lakehouse:
    """A lakehouse under a fresh bucket of the S3 server."""
    bucket = f"lake-{uuid.uuid4().hex[:12]}"
    servers.create_bucket(s3_endpoint, bucket)
    return S3Lakehouse(root=f"s3://{bucket}/lakehouse", engine=engine, spark=spark, s3=s3_storage)


@pytest.fixture
def landing(tmp_path: Path) -> LandingZone:
    root = tmp_path / "landing"
    root.mkdir()
    return LandingZone(root=str(root))


@pytest.fixture
def s3_landing(s3_endpoint: str, s3_storage: S3Storage) -> LandingZone:
    """A landing zone under a fresh bucket of the S3 server (files land with
    `support.land`)."""
    from resources.s3_landing import S3LandingZone

    bucket = f"landing-{uuid.uuid4().hex[:12]}"
    servers.create_bucket(s3_endpoint, bucket)
    return S3LandingZone(root=f"s3://{bucket}/landing", s3=s3_storage)


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
