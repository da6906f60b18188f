"""What the SQL catalog costs: registering a table, a run's check of a registered one, a
JDBC query, and a one-day run that registers its tables against one that finds them
registered, side by side on one long-lived Spark (resources/catalog.py).

- Registration: `Catalog.ensure` of one new table, as a run pays it at its end for a
  table it wrote that is new to the catalog (a Spark Connect session opened, the schema,
  CREATE TABLE, the location checked, the mark written), median over fresh tables; then
  the check of a registered table (one mark read), what every later run pays per table.
- JDBC: beeline's own timing of `SELECT count(*)` by name over a warm connection (the
  latency a JDBC tool sees), and the wall time of one `beeline -e` (a JVM, a connection,
  the query: what `make sql Q=...` adds to a running server).
- A one-day `dagster asset materialize` of visits_daily attached to the long-lived Spark,
  on a root new to the catalog (it registers visits_daily, visit_first_seen and
  input_versions, whose names the previous root held: the dearer path, a name moved),
  against the next day on the same root (registered): the run's share of registering.

Run: `.venv/bin/python benchmarks/catalog.py`.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyarrow as pa  # noqa: E402
from deltalake import write_deltalake  # noqa: E402
from run_cost import FIRST_DAY, deployment, materialize, write_day  # noqa: E402

from resources.catalog import Catalog, beeline  # noqa: E402
from resources.spark_server import SparkServer, long_lived_spark  # noqa: E402

TABLES = 8
QUERIES = 10
REPEATS = 3


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:6.0f} ms"


def _listed(seconds: list[float]) -> str:
    return ", ".join(f"{value * 1000:.0f}" for value in seconds) + " ms"


def _listed_s(seconds: list[float]) -> str:
    return ", ".join(f"{value:.1f}" for value in seconds) + " s"


def main() -> int:
    scratch = Path(tempfile.mkdtemp(prefix="bench-catalog-"))
    state = scratch / "spark"
    with long_lived_spark(state, os.environ, say=lambda line: None):
        server = SparkServer(state).running()
        assert server is not None
        catalog = Catalog(server.catalog, server.remote)
        tables = {}
        for i in range(TABLES + 1):
            location = scratch / "tables" / f"t{i}"
            write_deltalake(str(location), pa.table({"n": list(range(100 * (i + 1)))}))
            tables[f"t{i}"] = str(location)
        catalog.ensure({"t0": tables.pop("t0")})  # warm: Delta's first table resolution
        registering = []
        for table, location in tables.items():
            started = time.monotonic()
            catalog.ensure({table: location})
            registering.append(time.monotonic() - started)
        checking = []
        for _ in range(1000):
            started = time.perf_counter()
            Catalog(server.catalog, server.remote).marked("t1")
            checking.append(time.perf_counter() - started)
        print(f"Registering a table new to the catalog, median of {TABLES}:")
        print(f"  {_ms(statistics.median(registering))}   ({_listed(registering)})")
        check = statistics.median(checking) * 1e6
        print(f"A registered table's check (its mark read), median of 1000: {check:.0f} µs")

        statements = "; ".join(["SELECT count(*) FROM t8"] * QUERIES)
        command, env = beeline(server.jdbc, "--silent=false", "-e", statements)
        walls = []
        for _ in range(REPEATS):
            started = time.monotonic()
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
            walls.append(time.monotonic() - started)
            assert done.returncode == 0, done.stderr[-2000:]
        selected = [
            float(s)
            for s in re.findall(r"selected \(([\d.]+) seconds\)", done.stderr + done.stdout)
        ]
        single, env = beeline(server.jdbc, "-e", "SELECT count(*) FROM t8")
        once = []
        for _ in range(REPEATS):
            started = time.monotonic()
            subprocess.run(single, env=env, capture_output=True, check=True, timeout=300)
            once.append(time.monotonic() - started)
        warm = statistics.median(selected[1:])
        print(f"JDBC: SELECT count(*) by name, warm connection, median of {QUERIES - 1}:")
        print(f"  {_ms(warm)}   (the first on its connection {_ms(selected[0])})")
        print(f"JDBC: one `beeline -e` (JVM, connection, query), median of {REPEATS}:")
        print(f"  {statistics.median(once):.1f} s   ({', '.join(f'{t:.1f}' for t in once)})")

        landing = scratch / "landing"
        days = [FIRST_DAY + dt.timedelta(days=i) for i in range(2 * REPEATS + 1)]
        for day in days:
            write_day(landing, day, 3)
        spark = {"SPARK_REMOTE": server.remote, "SPARK_SERVER_STATE": str(state)}
        materialize(
            deployment(scratch / "warm-up", landing, spark), "--partition", days[-1].isoformat()
        )
        registers, registered = [], []
        for repeat in range(REPEATS):
            env = deployment(scratch / f"root{repeat}", landing, spark)
            registers.append(materialize(env, "--partition", days[2 * repeat].isoformat()))
            registered.append(materialize(env, "--partition", days[2 * repeat + 1].isoformat()))
        new, known = statistics.median(registers), statistics.median(registered)
        print(f"One-day run of visits_daily, attached, median of {REPEATS}:")
        print(f"  registering its 3 tables: {new:5.1f} s   ({_listed_s(registers)})")
        print(f"  tables registered:        {known:5.1f} s   ({_listed_s(registered)})")
        print(f"  registering / registered = {new / known:.2f}")
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
