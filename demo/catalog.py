"""The demo's last part: the tables by name over JDBC, the way `make sql`, beeline and any
JDBC tool reach them. The runs attached to the long-lived Spark registered the tables
they committed to; whatever else is under the root is registered here, as `make sql`
does. Then beeline asks the catalog for visits_daily's rows by name, and the answer is
checked against the table read directly.
"""

from __future__ import annotations

import csv
import io
import os
import subprocess

from assets.overwriting.data_overwrite import VISITS_DAILY
from resources import Lakehouse
from resources.catalog import BEELINE_PROMPT, beeline, tables_under
from resources.spark_server import SparkServer

QUERY = f"SELECT count(*) AS n FROM lakehouse.{VISITS_DAILY}"


def run(lakehouse: Lakehouse, visits: int) -> bool:
    """Prints its part of the report; whether the catalog's answer is the table's
    (True when there is no catalog to ask: the user's own Spark)."""
    catalog = lakehouse.sql_catalog()
    if catalog is None:
        print("11. SQL by name: skipped (the demo is not attached to the long-lived Spark).\n")
        return True
    server = SparkServer(os.environ["SPARK_SERVER_STATE"]).running()
    assert server is not None  # the demo's runs are attached to it
    catalog.ensure(tables_under(lakehouse.root))
    command, env = beeline(server.jdbc, "--outputformat=csv2", "-e", f"SHOW TABLES; {QUERY}")
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    lines = [BEELINE_PROMPT.sub("", line) for line in done.stdout.splitlines()]
    tables = sum(1 for line in lines if line.startswith("lakehouse,"))
    counted = lines[lines.index("n") :] if "n" in lines else []
    answer = [row["n"] for row in csv.DictReader(io.StringIO("\n".join(counted)))]
    same = done.returncode == 0 and answer == [str(visits)]
    print(f"11. SQL by name over JDBC ({server.jdbc}): {tables} tables in schema lakehouse.")
    print(
        f"    {QUERY}: {answer[0] if answer else done.stderr.strip()[-200:]}; equal to the "
        f"table read directly: {'yes' if same else 'NO'}"
    )
    print(f'    Ask your own: make sql Q="SELECT * FROM lakehouse.{VISITS_DAILY} LIMIT 5"\n')
    return same
