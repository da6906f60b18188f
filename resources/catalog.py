"""The SQL catalog: every Delta table of the lakehouse by name, `lakehouse.<table>`, in the
long-lived Spark's Hive metastore, where Spark Connect sessions, beeline and any JDBC
tool (HiveServer2's protocol) find the same tables (`resources/spark_server.py`).

A registration is `CREATE TABLE ... USING delta LOCATION`: the metastore keeps the name
and the location, and every query reads the schema and the files from the Delta log.
A write therefore never needs to refresh the catalog; only a name whose table moved
elsewhere (another lakehouse root) is registered again.

Who registers:
- a run attached to the long-lived Spark (through SPARK_SERVER_STATE), for the tables it
  committed to, once its work is done (`Lakehouse.register_committed`, at the resource's
  teardown): nothing it commits waits for the metastore;
- `make sql`, for every table under the root that is missing (written by a run that
  booted a local Spark, by the tests, or before the catalog existed).

A relation readers query by name that is no table of its own (the telemetry running
totals, the proxy's current snapshot, the visits exposition) is a `View` over registered
tables: `CREATE OR REPLACE VIEW`, made again whenever its SQL changes. The assets that
shape it expose it to their run's lakehouse (`Lakehouse.expose`), which registers it with
the tables it committed to; `make sql` registers every view as the data stands
(`assets/views.py`).

Each registration leaves a mark in the catalog's folder (a file per name, holding the
location, or the view's SQL), so that a run asks nothing of Spark for a name already
registered as it stands. The marks live beside the embedded metastore they describe, and
a mark that disagrees with the metastore is corrected at the next registration of that
name.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from deltalake import DeltaTable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SCHEMA = "lakehouse"
_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9_]")


def catalog_name(table: str) -> str:
    """The metastore's name of lakehouse table `table`: its path with each folder step
    as `__` and any other character a Hive name cannot hold as `_`
    (`telemetry/totals` -> `telemetry__totals`)."""
    return _NOT_IN_A_NAME.sub("_", table.strip("/").replace("/", "__")).lower()


@dataclass(frozen=True)
class View:
    """`lakehouse.<name>`: the query `select` over the lakehouse tables `reads`, which it
    names as `{0}`, `{1}`, ... (each table's catalog name is put in its place)."""

    name: str
    select: str
    reads: tuple[str, ...]

    def sql(self, name_of: Callable[[str], str]) -> str:
        """The query, each table it reads named by `name_of(table)`."""
        return self.select.format(*(name_of(table) for table in self.reads))

    def catalog_sql(self) -> str:
        return self.sql(lambda table: f"{SCHEMA}.{catalog_name(table)}")


def _quoted(location: str) -> str:
    return "'" + location.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _same_location(shown: str, location: str) -> bool:
    """Spark shows a local location as `file:/path`."""
    return shown.removeprefix("file:").rstrip("/") == location.removeprefix("file:").rstrip("/")


class Catalog:
    """The catalog of the long-lived Spark at `remote`, whose folder is `folder`."""

    def __init__(self, folder: Path | str, remote: str) -> None:
        self.folder = Path(folder)
        self.remote = remote
        self.marks = self.folder / "registered"
        self.view_marks = self.folder / "registered_views"

    def marked(self, name: str) -> str | None:
        """The location `name` was registered at, as its mark says."""
        try:
            return (self.marks / name).read_text()
        except OSError:
            return None

    def _mark(self, name: str, location: str, *, marks: Path | None = None) -> None:
        folder = marks or self.marks
        partial = folder / f".{name}.{uuid.uuid4().hex}"
        partial.write_text(location)
        partial.replace(folder / name)

    def _view_mark(self, name: str) -> dict | None:
        """The view `name` as it was registered: its SQL and the tables it reads."""
        try:
            return json.loads((self.view_marks / name).read_text())
        except (OSError, ValueError):
            return None

    @contextlib.contextmanager
    def _session(self) -> Iterator[SparkSession]:
        """A Spark Connect session of its own on the server, its schema there."""
        from pyspark.sql import SparkSession

        session = SparkSession.builder.remote(self.remote).create()
        try:
            session.sql(f"CREATE DATABASE IF NOT EXISTS {SCHEMA}")
            self.marks.mkdir(parents=True, exist_ok=True)
            self.view_marks.mkdir(parents=True, exist_ok=True)
            yield session
        finally:
            session.stop()

    def prepare(self) -> None:
        """The schema, so that its JDBC URL answers before any table is registered; run
        once the server is up (it also loads the metastore client, 2 s on a cold JVM,
        which the first run's registration would otherwise wait for)."""
        with self._session():
            pass

    def ensure(self, tables: Mapping[str, str], views: Sequence[View] = ()) -> dict[str, float]:
        """Register each `table: location` that is not marked at that location, then each
        view whose SQL differs from its mark (every table a view reads must be among
        `tables` or registered already); returns the seconds each registration took. One
        Spark Connect session for all of them, opened only when one is missing."""
        missing = {
            name: location
            for table, location in tables.items()
            if self.marked(name := catalog_name(table)) != location
        }
        changed = [
            view
            for view in views
            if (self._view_mark(view.name) or {}).get("sql") != view.catalog_sql()
        ]
        if not missing and not changed:
            return {}
        took = {}
        with self._session() as session:
            for name, location in missing.items():
                started = time.monotonic()
                _register(session, name, location)
                self._mark(name, location)
                took[name] = time.monotonic() - started
            for view in changed:
                started = time.monotonic()
                if self.marked(view.name) is not None:
                    # The name was a table's: an external one, so dropping it drops the
                    # name only.
                    session.sql(f"DROP TABLE IF EXISTS {SCHEMA}.{view.name}")
                    (self.marks / view.name).unlink()
                session.sql(f"CREATE OR REPLACE VIEW {SCHEMA}.{view.name} AS {view.catalog_sql()}")
                reads = [catalog_name(table) for table in view.reads]
                mark = json.dumps({"sql": view.catalog_sql(), "reads": reads})
                self._mark(view.name, mark, marks=self.view_marks)
                took[view.name] = time.monotonic() - started
        return took

    def forget_missing(self) -> list[str]:
        """Drop the names whose table is gone (a local location without its Delta log,
        e.g. a week frozen into its year), the views that read one, and their marks;
        returns the names dropped."""
        gone = [
            mark.name
            for mark in sorted(self.marks.glob("[!.]*"))
            if not _is_delta_table(mark.read_text())
        ]
        dangling = [
            mark.name
            for mark in sorted(self.view_marks.glob("[!.]*"))
            if set(gone) & set((self._view_mark(mark.name) or {}).get("reads", []))
        ]
        if gone or dangling:
            with self._session() as session:
                for name in dangling:
                    session.sql(f"DROP VIEW IF EXISTS {SCHEMA}.{name}")
                    (self.view_marks / name).unlink()
                for name in gone:
                    # An external table: dropping it drops the name only.
                    session.sql(f"DROP TABLE IF EXISTS {SCHEMA}.{name}")
                    (self.marks / name).unlink()
        return dangling + gone

    def try_ensure(
        self,
        tables: Mapping[str, str],
        views: Sequence[View] = (),
        *,
        warn: Callable[[str], None],
    ) -> None:
        """`ensure`, for a process whose data is already committed: a registration that
        fails is said to `warn` in one line, not raised (`make sql` registers it)."""
        try:
            self.ensure(tables, views)
        except Exception as error:  # the commit stands; the catalog catches up later
            reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
            names = [*tables, *(view.name for view in views)]
            warn(
                f"could not register {', '.join(names)} in the SQL catalog "
                f"({reason or type(error).__name__}): `make sql` registers what is missing"
            )


def _is_delta_table(location: str) -> bool:
    """A local location holds a Delta table (as delta-rs reads it); an object-store one
    is taken as the caller says (the runs that wrote it)."""
    return "://" in location or DeltaTable.is_deltatable(location)


def _register(session: SparkSession, name: str, location: str) -> None:
    """`lakehouse.<name>` names the Delta table at `location` (created, or moved there).
    Refused for a location holding no table: Delta's CREATE TABLE would make an empty
    one there."""
    if not _is_delta_table(location):
        raise ValueError(f"no Delta table at {location}")
    qualified = f"{SCHEMA}.{name}"
    session.sql(f"CREATE TABLE IF NOT EXISTS {qualified} USING delta LOCATION {_quoted(location)}")
    shown = [
        row.data_type
        for row in session.sql(f"DESCRIBE TABLE EXTENDED {qualified}").collect()
        if row.col_name == "Location"
    ]
    if shown and not _same_location(shown[0], location):
        # Registered elsewhere before (another root): an external table, so dropping it
        # drops the name only, never the files at either location.
        session.sql(f"DROP TABLE {qualified}")
        session.sql(f"CREATE TABLE {qualified} USING delta LOCATION {_quoted(location)}")


BEELINE_PROMPT = re.compile(r"^\d+: jdbc:hive2://\S+> ")
"""Beeline prints its prompt before a statement's rows even when silent."""


def beeline(jdbc: str, *options: str) -> tuple[list[str], dict[str, str]]:
    """The command and environment of pyspark's own beeline connected to `jdbc`."""
    from resources.spark import ensure_java
    from resources.spark_server import spark_home

    command = [str(spark_home() / "bin" / "beeline"), "-u", jdbc, "--silent=true", *options]
    return command, {**os.environ, "JAVA_HOME": ensure_java(), "SPARK_HOME": str(spark_home())}


def tables_under(root: str) -> dict[str, str]:
    """table: location of each Delta table under the lakehouse root `root`, a folder
    delta-rs opens, named by its path under the root. Local roots only: the tables
    of an object-store root are registered by the runs that write them."""
    found: dict[str, str] = {}
    if "://" in root or not Path(root).is_dir():
        return found
    for folder, children, _ in os.walk(root):
        if _is_delta_table(folder):
            children.clear()  # a table's own folders hold no tables
            path = Path(folder)
            found[path.relative_to(root).as_posix()] = str(path)
        else:
            children[:] = sorted(child for child in children if not child.startswith("."))
    return found
