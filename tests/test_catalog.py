"""The SQL catalog (resources/catalog.py): a materialization attached to the long-lived
Spark registers its tables by name, and a JDBC client (pyspark's beeline, over
HiveServer2's protocol) reads the rows it wrote; `make sql` registers what a run without
the catalog wrote and answers by name. Real servers throughout: the long-lived Spark is
Spark's Thrift server with the Spark Connect plugin, with its embedded Derby metastore.

Catalog calls run in processes of their own: this test process holds a classic Spark
session, and a process holds a Connect session or a classic one, never both."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
import servers
from deltalake import write_deltalake
from support import day_of_visits, materialize_side_by_side

from assets.overwriting.data_overwrite import VISITS_DAILY
from demo.servers import create_databases
from resources import Lakehouse
from resources.catalog import BEELINE_PROMPT, beeline, catalog_name
from resources.spark_server import (
    METASTORE_URL_ENV,
    ServerDescription,
    SparkServer,
    alive,
    long_lived_spark,
)

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DAY = dt.date(2024, 3, 4)


def jdbc_query(jdbc: str, query: str) -> subprocess.CompletedProcess:
    """`query` through beeline on `jdbc`, its rows as CSV (header first)."""
    command, env = beeline(jdbc, "--outputformat=csv2", "-e", query)
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def rows_of(done: subprocess.CompletedProcess) -> list[dict[str, str]]:
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [BEELINE_PROMPT.sub("", line) for line in done.stdout.splitlines()]
    return list(csv.DictReader(io.StringIO("\n".join(lines))))


def with_catalog(server: ServerDescription, statements: str, *args: str) -> str:
    """`statements` run in a process of its own with `catalog`, the server's `Catalog`,
    and `args`; returns what they printed."""
    script = (
        "import json, sys\nfrom resources.catalog import Catalog\n"
        "catalog, args = Catalog(sys.argv[1], sys.argv[2]), sys.argv[3:]\n" + statements
    )
    done = subprocess.run(
        [sys.executable, "-c", script, server.catalog, server.remote, *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def ensure_registered(server: ServerDescription, tables: dict[str, str]) -> None:
    with_catalog(server, "catalog.ensure(json.loads(args[0]))", json.dumps(tables))


def test_a_run_attached_to_the_long_lived_spark_registers_its_tables_for_jdbc(
    tmp_path, spark, landing, write_visits, spark_remote
):
    write_visits(DAY, "part.jsonl", day_of_visits(DAY, 12))
    lakehouse = Lakehouse(root=str(tmp_path / "lakehouse"), spark=spark)
    materialize_side_by_side(
        tmp_path / "dagster",
        lakehouse,
        landing,
        [["--select", "visits_daily", "--partition", DAY.isoformat()]],
        spark=spark_remote,
    )
    server = SparkServer(spark_remote["SPARK_SERVER_STATE"]).running()
    assert server is not None and server.jdbc.endswith("/lakehouse")

    tables = {row["tableName"] for row in rows_of(jdbc_query(server.jdbc, "SHOW TABLES"))}
    # The asset's table and the control tables its materialization wrote.
    assert {"visits_daily", "visit_first_seen", "input_versions"} <= tables

    written = sorted(r["visit_id"] for r in lakehouse.read_arrow(VISITS_DAILY).to_pylist())
    read = rows_of(
        jdbc_query(
            server.jdbc,
            f"SELECT visit_id, event_date FROM visits_daily WHERE event_date = '{DAY}' "
            "ORDER BY visit_id",
        )
    )
    assert [row["visit_id"] for row in read] == written and len(written) == 12
    assert {row["event_date"] for row in read} == {DAY.isoformat()}

    # A name the catalog does not hold is an error that names it.
    missing = jdbc_query(server.jdbc, "SELECT * FROM lakehouse.no_such_table")
    assert missing.returncode != 0
    assert "no_such_table" in missing.stdout + missing.stderr


def test_a_name_registered_at_another_root_is_moved_and_neither_tables_files_touched(
    tmp_path, spark_remote
):
    """Registering is by location: the same table name under a second lakehouse root (a
    second deployment, a test's scratch root) points the name at the second table, and
    dropping the old registration leaves the first table's files where they were."""
    server = SparkServer(spark_remote["SPARK_SERVER_STATE"]).running()
    assert server is not None
    first, second = tmp_path / "one" / "moved_table", tmp_path / "two" / "moved_table"
    write_deltalake(str(first), pa.table({"n": [1, 2]}))
    write_deltalake(str(second), pa.table({"n": [10, 20, 30]}))
    query = "SELECT sum(n) AS total FROM lakehouse.moved_table"

    ensure_registered(server, {"moved_table": str(first)})
    assert rows_of(jdbc_query(server.jdbc, query)) == [{"total": "3"}]
    ensure_registered(server, {"moved_table": str(second)})
    assert rows_of(jdbc_query(server.jdbc, query)) == [{"total": "60"}]
    assert (first / "_delta_log" / "00000000000000000000.json").is_file()
    assert len(list(first.glob("*.parquet"))) == 1

    # The table goes (a week frozen into its year): `make sql` drops its name.
    shutil.rmtree(second)
    forgot = with_catalog(server, "print(*catalog.forget_missing())")
    assert "moved_table" in forgot.split()
    shown = rows_of(jdbc_query(server.jdbc, "SHOW TABLES"))
    assert "moved_table" not in {row["tableName"] for row in shown}


def test_a_registration_that_fails_is_one_line_and_not_an_error(tmp_path, spark_remote):
    """A run's data is committed before it registers its tables: a registration that
    fails (here of a location holding no Delta table, where Delta would make an empty
    one) is said in one line, and nothing is made there."""
    server = SparkServer(spark_remote["SPARK_SERVER_STATE"]).running()
    assert server is not None
    said = with_catalog(
        server,
        'catalog.try_ensure({"not_a_table": args[0]}, warn=print)\nprint("the run goes on")',
        str(tmp_path / "empty"),
    ).splitlines()
    assert said[0].startswith("could not register not_a_table in the SQL catalog (")
    assert said[0].endswith("`make sql` registers what is missing")
    assert said[1] == "the run goes on"
    assert not (Path(server.catalog) / "registered" / "not_a_table").exists()
    assert not (tmp_path / "empty").exists()


@pytest.mark.slow  # a long-lived Spark of its own, started and stopped, as make dev's is
def test_make_sql_registers_what_runs_without_the_catalog_wrote_and_answers_by_name(tmp_path):
    """`make sql Q=...` (platform/sql.py) with no long-lived Spark up: it starts one,
    registers the tables a run without the catalog wrote (nested ones included), prints
    the statement's rows, and stops the server it started."""
    root = tmp_path / "lakehouse"
    write_deltalake(str(root / "visits_daily"), pa.table({"visit_id": ["a", "b", "c"]}))
    write_deltalake(str(root / "telemetry" / "totals"), pa.table({"n": [5]}))
    home = tmp_path / "dagster"
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("SPARK_REMOTE", "SPARK_MASTER", "SPARK_SERVER_STATE")
    }
    done = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "platform" / "sql.py")],
        env={
            **env,
            "DAGSTER_HOME": str(home),
            "LAKEHOUSE_ROOT": str(root),
            "Q": "SELECT count(*) AS n FROM lakehouse.visits_daily WHERE visit_id <> 'b'",
        },
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| n  |" in done.stdout and "| 2  |" in done.stdout
    assert "jdbc:hive2://" not in done.stdout  # beeline's prompt is not part of the rows
    assert "Registered 2 table(s) and view(s) new to the catalog" in done.stderr
    assert f"{catalog_name('telemetry/totals')}, visits_daily" in done.stderr
    state = home.parent / "spark" / "connect"
    assert SparkServer(state).description() is None
    pid = int(done.stderr.split("pid ")[1].split(",")[0])
    assert not alive(pid)


@pytest.mark.slow  # a minute: two long-lived Sparks and the metastore's tables made anew
def test_the_catalog_lives_in_postgres_when_lakehouse_metastore_url_names_it(tmp_path):
    """LAKEHOUSE_METASTORE_URL puts the metastore in PostgreSQL (its driver from set-up's
    jar cache): a table registered through one long-lived Spark is found by name through
    another one that shares nothing with it on disk, only the database."""
    with servers.postgres_server() as url:
        create_databases(url, ["metastore"])
        host = url.split("@", 1)[1].rsplit("/", 1)[0]
        env = {METASTORE_URL_ENV: f"jdbc:postgresql://{host}/metastore?user=postgres"}
        table = tmp_path / "lakehouse" / "payments"
        write_deltalake(str(table), pa.table({"amount": [1.5, 2.5]}))
        query = "SELECT sum(amount) AS total FROM lakehouse.payments"
        for state, register in ((tmp_path / "first", True), (tmp_path / "second", False)):
            with long_lived_spark(state, env, say=lambda line: None):
                server = SparkServer(state).running()
                assert server is not None
                if register:
                    ensure_registered(server, {"payments": str(table)})
                assert rows_of(jdbc_query(server.jdbc, query)) == [{"total": "4.0"}]
        assert not (tmp_path / "first" / "catalog" / "metastore_db").exists()
