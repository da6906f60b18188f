"""`make sql`: the lakehouse's tables by name, in SQL, over JDBC.

    make sql                                                 # beeline, interactive
    make sql Q="SELECT count(*) FROM lakehouse.visits_daily"  # one statement, its rows

Uses the long-lived Spark of `make dev` when it is up (else starts one for the length of
the command and stops it after), drops the names whose table is gone, registers every
table under LAKEHOUSE_ROOT that its catalog lacks and every view as the data stands
(resources/catalog.py, assets/views.py), and runs
pyspark's own beeline on the catalog's JDBC URL. Any JDBC tool (DBeaver, Superset,
another beeline) connects to the same URL while `make dev` runs. Run as a script
(`platform/` is not a package).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

from assets.views import register_lakehouse  # noqa: E402
from resources import Lakehouse  # noqa: E402
from resources.catalog import BEELINE_PROMPT, Catalog, beeline  # noqa: E402
from resources.object_uri import is_object_store  # noqa: E402
from resources.spark_server import (  # noqa: E402
    SparkServer,
    long_lived_spark,
    server_state,
)


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def register_missing(catalog: Catalog, root: str) -> None:
    if is_object_store(root):
        say(f"Tables under {root} are registered by the runs that write them.")
    started = time.monotonic()
    gone = catalog.forget_missing()
    if gone:
        say(f"Dropped {len(gone)} name(s) whose table is gone: {', '.join(gone)}")
    took = register_lakehouse(catalog, Lakehouse(root=root))
    if took:
        say(
            f"Registered {len(took)} table(s) and view(s) new to the catalog in "
            f"{time.monotonic() - started:.1f} s: {', '.join(sorted(took))}"
        )


def run_beeline(jdbc: str, query: str | None) -> int:
    """Beeline on `jdbc`: interactive, or `query`'s rows as a table."""
    if not query:
        command, env = beeline(jdbc)
        return subprocess.run(command, env=env).returncode
    command, env = beeline(jdbc, "--outputformat=table", "-e", query)
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True) as shell:
        assert shell.stdout is not None
        for line in shell.stdout:
            print(BEELINE_PROMPT.sub("", line), end="", flush=True)
    return shell.returncode


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--query", "-q", default=os.environ.get("Q") or None)
    args = parser.parse_args(argv)
    home = Path(os.environ.get("DAGSTER_HOME", PROJECT_ROOT / ".data" / "dagster"))
    root = os.environ.get("LAKEHOUSE_ROOT", ".data/lakehouse")
    if not is_object_store(root) and not Path(root).is_absolute():
        root = str((PROJECT_ROOT / root).resolve())
    state = server_state(home)
    with long_lived_spark(state, os.environ, say=say) as spark_env:
        if not spark_env:
            say(
                "make sql needs the long-lived Spark's catalog: unset SPARK_REMOTE and "
                "SPARK_MASTER, or point beeline at your own Thrift server"
            )
            return 2
        described = SparkServer(state).running()
        if described is None or not described.jdbc:
            say(
                "the long-lived Spark that is up predates its SQL catalog: stop `make dev` "
                "and start it again"
            )
            return 2
        register_missing(Catalog(described.catalog, described.remote), root)
        return run_beeline(described.jdbc, args.query)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
