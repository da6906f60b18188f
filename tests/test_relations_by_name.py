"""Every asset answers by name over JDBC, tables and views alike: each source lands a
little, plain `dagster asset materialize` runs attached to the long-lived Spark build
every asset (the telemetry twice, the second time for a late file), and beeline then
asks the catalog for every asset the definitions build, by name. The next asset whose
relation is not registered (a view nobody registers, say) fails here.

The running totals, a view over two tables, answer with exactly the rows and columns
`control.running_totals` returns, for all subjects and for one."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import random
import subprocess
from pathlib import Path

import dagster as dg
import pytest
from support import day_of_visits, materialize_all, platform_module, run_process_env
from telemetry_history import history, shuffled, write
from test_catalog import jdbc_query

from assets.telemetry import control
from assets.views import asset_relations
from demo import database, updates, warehouse
from demo.landing_files import LandingFiles
from resources import Lakehouse, LandingZone
from resources.catalog import BEELINE_PROMPT
from resources.lakehouse.predicates import eq
from resources.spark_server import SparkServer

DAY = dt.date(2024, 3, 4)
"""A Monday: its week is a partition of visits_weekly once its days are in."""
BATCH, ENRICHED_RUN = "2024-03-04-a", "2024-03-04-01-00-00"
SUBJECTS = ["Tool01", "Line 3 'north'"]
"""A subject key with a quote: the view's predicates are the reader's own."""


def land_every_source(landing: Path) -> list:
    """A day of visits, device changes, catalog changes and payments, an event batch and a
    finished enriched run; returns the telemetry reports, to deliver in two waves."""
    visits = landing / "visits" / f"date={DAY}"
    visits.mkdir(parents=True)
    (visits / "part-0.jsonl").write_text(
        "".join(json.dumps(v) + "\n" for v in day_of_visits(DAY, 40))
    )
    rng = random.Random(5)
    files = LandingFiles(LandingZone(root=str(landing)))
    updates._write_cdc(files, DAY, updates._cdc_day(DAY, rng))
    updates._write_catalog(files, DAY, updates._catalog_day(DAY, rng))
    database._write(files, DAY, "batch-1.jsonl", database._payments(DAY, rng))
    start = dt.datetime.combine(DAY, dt.time(), tzinfo=dt.UTC)
    events = warehouse._batches(start, rng)[BATCH]
    (landing / "events").mkdir(parents=True)
    (landing / "events" / f"{BATCH}.jsonl").write_text(
        "".join(json.dumps(event) + "\n" for event in events)
    )
    warehouse._write_run(files, ENRICHED_RUN, f"{start:%Y-%m-%dT%H:%M:%SZ}", rng, done=True)
    return shuffled(history(SUBJECTS, 4, 30))


def results(done: subprocess.CompletedProcess, headers: list[list[str]]) -> list[list[dict]]:
    """The rows of each statement beeline ran, one after another, with `headers` their
    columns: beeline's CSV starts each result with its header."""
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [BEELINE_PROMPT.sub("", line) for line in done.stdout.splitlines()]
    split: list[list[dict]] = []
    for values in csv.reader(io.StringIO("\n".join(lines))):
        if values in headers:
            split.append([])
        elif values:
            split[-1].append(dict(zip(headers[len(split) - 1], values, strict=True)))
    return split


def as_text(value: object) -> str:
    """A value as beeline's CSV spells it (timestamps in the server's zone, UTC)."""
    if isinstance(value, dt.datetime):
        text = value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f").rstrip("0")
        return text + "0" if text.endswith(".") else text
    return str(value)


@pytest.mark.run_processes
def test_every_asset_answers_by_name_and_the_running_totals_view_is_running_totals(
    tmp_path, spark, spark_remote
):
    landing = tmp_path / "landing"
    reports = land_every_source(landing)
    first, late = reports[: len(reports) // 2], reports[len(reports) // 2 :]
    for report in first:
        write(landing, report.path, report.content)
    lakehouse = Lakehouse(root=str(tmp_path / "lakehouse"), spark=spark)
    home = tmp_path / "dagster"
    home.mkdir()
    with dg.DagsterInstance.from_config(str(home)) as instance:
        for partitions, keys in (
            ("subjects", SUBJECTS),
            ("event_batches", [BATCH]),
            ("enriched_runs", [ENRICHED_RUN]),
        ):
            instance.add_dynamic_partitions(partitions, keys)
    env = run_process_env(home, lakehouse, LandingZone(root=str(landing)), spark_remote)
    telemetry = ["telemetry_raw", "telemetry_running_totals", "telemetry_hourly"]
    daily = ["visits_daily", "devices", "device_catalog", "payments", "user_sessions"]
    materialize_all(
        env,
        [
            ["--select", ",".join(daily), "--partition", DAY.isoformat()],
            ["--select", "user_events_staging,user_events", "--partition", BATCH],
            ["--select", "shredded_events,warehouse_events", "--partition", ENRICHED_RUN],
            *(["--select", ",".join(telemetry), "--partition", key] for key in SUBJECTS),
        ],
    )
    for report in late:
        write(landing, report.path, report.content)
    materialize_all(
        env,
        [
            ["--select", "visits_weekly", "--partition", DAY.isoformat()],
            ["--select", "device_snapshot"],
            *(["--select", ",".join(telemetry), "--partition", key] for key in SUBJECTS),
        ],
    )

    server = SparkServer(spark_remote["SPARK_SERVER_STATE"]).running()
    assert server is not None
    relations = asset_relations(platform_module("definitions").build_definitions({}))
    assert len(relations) == 18  # 14 assets; the load manifest's 3 event tables each
    every = " UNION ALL ".join(
        f"SELECT '{name}' AS relation, count(*) AS n FROM {name}" for name in relations
    )
    columns = control.TOTALS_SCHEMA.names
    totals = f"SELECT * FROM lakehouse.{control.TOTALS}"
    order = "ORDER BY subject_key, ts, source, line"
    one = f"WHERE {eq('subject_key', SUBJECTS[1]).render('spark')}"
    # One beeline (a JVM of its own) for the three statements.
    done = jdbc_query(server.jdbc, f"{every}; {totals} {order}; {totals} {one} {order}")
    counted, everything, of_one = results(done, [["relation", "n"], columns, columns])

    assert {row["relation"] for row in counted} == set(relations)
    assert [row["relation"] for row in counted if row["n"] == "0"] == []
    for read, subject in ((everything, None), (of_one, SUBJECTS[1])):
        expected = control.running_totals(lakehouse, subject).to_pylist()
        assert read and list(read[0]) == columns
        assert read == [{name: as_text(row[name]) for name in columns} for row in expected]
