"""The demo's last part: the tables by name over JDBC, the way `make sql`, beeline and any
JDBC tool reach them. The runs attached to the long-lived Spark registered the tables
they committed to and the views they shaped; whatever else is under the root is
registered here, as `make sql` does. Then beeline asks the catalog for every asset by
name, visits_daily's rows and one subject's running totals, and the answers are checked
against the tables read directly.
"""

from __future__ import annotations

import csv
import io
import os
import subprocess
import time
from collections.abc import Sequence

import pyarrow.compute as pc

from assets.overwriting.data_overwrite import VISITS_DAILY
from assets.telemetry.control import TOTALS, running_totals
from assets.views import register_lakehouse
from resources import Lakehouse
from resources.catalog import BEELINE_PROMPT, beeline
from resources.spark_server import SparkServer

SUBJECT = "Tool01"
TOTALS_QUERY = (
    f"SELECT max(cum_in_spec) AS n FROM lakehouse.{TOTALS} WHERE subject_key = '{SUBJECT}'"
)


def every_relation(relations: Sequence[str]) -> str:
    """One statement that names every relation: a row per relation with its row count."""
    return " UNION ALL ".join(
        f"SELECT '{name}' AS relation, count(*) AS n FROM {name}" for name in relations
    )


def jdbc_rows(jdbc: str, query: str) -> tuple[list[dict[str, str]] | None, str, float]:
    """`query`'s rows through beeline (None and beeline's error when it fails), and the
    seconds it took."""
    command, env = beeline(jdbc, "--outputformat=csv2", "-e", query)
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    took = time.monotonic() - started
    if done.returncode != 0:
        return None, (done.stderr.strip() or done.stdout.strip())[-300:], took
    lines = [BEELINE_PROMPT.sub("", line) for line in done.stdout.splitlines()]
    return list(csv.DictReader(io.StringIO("\n".join(lines)))), "", took


def run(lakehouse: Lakehouse, visits: int, relations: Sequence[str]) -> bool:
    """Prints its part of the report; whether the catalog answers for every asset in
    `relations` and its answers are the tables' (True when there is no catalog to ask:
    the user's own Spark)."""
    catalog = lakehouse.sql_catalog()
    if catalog is None:
        print("11. SQL by name: skipped (the demo is not attached to the long-lived Spark).\n")
        return True
    server = SparkServer(os.environ["SPARK_SERVER_STATE"]).running()
    assert server is not None  # the demo's runs are attached to it
    register_lakehouse(catalog, lakehouse)
    counts, error, _ = jdbc_rows(server.jdbc, every_relation(relations))
    answered = {row["relation"]: int(row["n"]) for row in counts or []}
    every = set(answered) == set(relations) and all(answered.values())
    daily = answered.get(f"lakehouse.{VISITS_DAILY}")
    by_name = daily == visits
    totals, totals_error, took = jdbc_rows(server.jdbc, TOTALS_QUERY)
    expected = pc.max(running_totals(lakehouse, SUBJECT)["cum_in_spec"]).as_py()
    same_totals = totals is not None and totals == [{"n": str(expected)}]
    print(f"11. SQL by name over JDBC ({server.jdbc}):")
    print(
        f"    every asset answers by name ({len(answered)} of {len(relations)}, each with "
        f"rows): {'yes' if every else 'NO ' + error}"
    )
    print(
        f"    SELECT count(*) FROM lakehouse.{VISITS_DAILY}: {daily}; equal "
        f"to the table read directly: {'yes' if by_name else 'NO'}"
    )
    shown = totals[0]["n"] if totals else totals_error
    print(
        f"    {TOTALS_QUERY}: {shown} in {took:.1f} s (beeline's start included); equal to "
        f"running_totals: {'yes' if same_totals else 'NO'}"
    )
    print(f'    Ask your own: make sql Q="SELECT * FROM lakehouse.{VISITS_DAILY} LIMIT 5"\n')
    return every and by_name and same_totals
