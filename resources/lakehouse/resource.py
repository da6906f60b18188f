"""`Lakehouse`: the one Delta port pattern code talks to, as a Dagster resource."""

from __future__ import annotations

import random
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote, urlparse

import dagster as dg
import pyarrow as pa
from pyarrow import fs as pafs
from pydantic import Field, PrivateAttr

from resources.catalog import Catalog, View
from resources.lakehouse import port
from resources.lakehouse.frames import StagedParts, staged_parts
from resources.lakehouse.predicates import Dialect, Predicate, Sha256, Value
from resources.object_uri import is_object_store, object_path
from resources.spark import SparkResource

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from resources.object_store import S3Storage

TABLE_DEFAULTS: Mapping[str, str] = {"delta.checkpointInterval": "10"}
"""Properties of every table the lakehouse creates, unless the creating write sets them.
A checkpoint every 10 commits, Delta Spark's default (delta-rs's is 100), so that both
engines write the same log: a snapshot holds the checkpoint and at most nine commits, and
a commit on it scans that many files' actions. delta-rs at 100 made each replaceWhere of a
partition slow down with the commits since the checkpoint: a year of days, one commit
each, took 21 ms a day against 11 ms (`benchmarks/run_cost.py` measures the range)."""

_TABLE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.=-]*(/[A-Za-z0-9_][A-Za-z0-9_.=-]*)*$")


class Lakehouse(dg.ConfigurableResource):
    """Delta tables under one root, behind one small port with two engines.

    Every write carries commit metadata (run id, asset, partition, source facts) in the
    Delta commit itself and returns the version it created with its operation metrics.
    A write that loses an optimistic-concurrency race is re-run against the new snapshot:
    every write the platform makes is a replace of a window it owns, a merge, or an
    idempotent append, so re-running it is safe, and no commit is lost.
    """

    root: str
    """A local directory or an object-store URI (`s3://bucket/prefix`)."""
    engine: Literal["delta-rs", "delta-spark"] = "delta-rs"
    spark: SparkResource = Field(default_factory=SparkResource)
    """The Spark the delta-spark engine and `read` use; by default a local one, which
    starts only when something needs it (delta-rs reads and writes need no JVM)."""
    commit_attempts: int = 10

    _engine: port.DeltaEngine | None = PrivateAttr(default=None)
    _through_engine: dict[str, Lakehouse] = PrivateAttr(default_factory=dict)
    _catalog: list[Catalog | None] = PrivateAttr(default_factory=list)
    """The SQL catalog tables are registered in, once looked up (None: there is none)."""
    _committed: set[str] = PrivateAttr(default_factory=set)
    """The tables this lakehouse committed to, registered in the SQL catalog at the end
    of the run (`teardown_after_execution`)."""
    _exposed: dict[str, View] = PrivateAttr(default_factory=dict)
    """The views the run's assets shaped (`expose`), registered with those tables."""

    # -- naming -------------------------------------------------------------------------

    @property
    def dialect(self) -> Dialect:
        """The SQL dialect of this engine, for MERGE conditions that pin a data value
        (render the value's predicate with it; keep column comparisons as text)."""
        return "spark" if self.engine == "delta-spark" else "datafusion"

    def uri(self, table: str) -> str:
        """Where table `table` (e.g. `visits_daily`) lives under the lakehouse root."""
        if not _TABLE_NAME.match(table) or ".." in table:
            raise port.LakehouseError(
                f"invalid table name {table!r}: use letters, digits, '_', '-', '.', '=' "
                "in '/'-separated segments"
            )
        return f"{self.root.rstrip('/')}/{table}"

    def _storage(self) -> S3Storage | None:
        """How to reach the object store under an `s3://` root: the AWS_* environment
        here (`resources.object_store.S3Lakehouse` carries settings of its own)."""
        if not is_object_store(self.root):
            return None
        from resources.object_store import S3Storage

        return S3Storage()

    def _delta(self) -> port.DeltaEngine:
        if self._engine is None:
            storage = self._storage()
            options = storage.delta_rs_options() if storage else None
            if self.engine == "delta-spark":
                from resources.lakehouse.delta_spark import DeltaSparkEngine

                self._engine = DeltaSparkEngine(spark=self.spark.session, storage_options=options)
            else:
                from resources.lakehouse.delta_rs import DeltaRsEngine

                self._engine = DeltaRsEngine(spark=self.spark.session, storage_options=options)
        return self._engine

    def in_process(self) -> Lakehouse:
        """This lakehouse through delta-rs alone, whatever its engine: for the small
        commits of control tables, and of code that must not start a JVM (a sensor's own
        state). Tables written by one engine are readable and writable by the other."""
        return self._through("delta-rs")

    def on_spark(self) -> Lakehouse:
        """This lakehouse through delta-spark, whatever its engine: for work whose rows are
        computed by Spark and must be written by its executors, never collected here."""
        return self._through("delta-spark")

    def _through(self, engine: Literal["delta-rs", "delta-spark"]) -> Lakehouse:
        if self.engine == engine:
            return self
        if engine not in self._through_engine:
            settings = {name: getattr(self, name) for name in type(self).model_fields}
            self._through_engine[engine] = type(self)(**{**settings, "engine": engine})
        return self._through_engine[engine]

    def _filesystem(self) -> tuple[pafs.FileSystem, Callable[[str], str]]:
        """The filesystem under the root, and how a URI becomes its path there."""
        storage = self._storage()
        if storage is not None:
            return storage.filesystem(), object_path
        return pafs.LocalFileSystem(), _local_path

    def missing_files(self, table: str, version: int) -> list[str]:
        """Data files `version` references that storage no longer holds (vacuumed)."""
        uris = self._delta().file_uris(self.uri(table), version)
        filesystem, path = self._filesystem()
        infos = filesystem.get_file_info([path(uri) for uri in uris])
        return [
            uri
            for uri, info in zip(uris, infos, strict=True)
            if info.type == pafs.FileType.NotFound
        ]

    def drop(self, table: str) -> bool:
        """Delete a table's directory, data and log (for tables retired from use).
        Returns whether there was one."""
        filesystem, path = self._filesystem()
        location = path(self.uri(table))
        if filesystem.get_file_info(location).type == pafs.FileType.NotFound:
            return False
        for lakehouse in (self, *self._through_engine.values()):
            if lakehouse._engine is not None:
                lakehouse._engine.forget(self.uri(table))
        filesystem.delete_dir(location)
        return True

    # -- marker files (e.g. a stage's `_SUCCESS`) -----------------------------------------

    def write_marker(self, path: str, text: str) -> None:
        """Write a small text file under the root, whole or not at all: on a local disk
        it is written beside and renamed into place; an object store's PUT is atomic."""
        filesystem, to_path = self._filesystem()
        target = to_path(self.uri(path))
        filesystem.create_dir(target.rsplit("/", 1)[0], recursive=True)
        if isinstance(filesystem, pafs.LocalFileSystem):
            partial = f"{target}.{uuid.uuid4().hex}.partial"
            with filesystem.open_output_stream(partial) as out:
                out.write(text.encode())
            filesystem.move(partial, target)
            return
        with filesystem.open_output_stream(target) as out:
            out.write(text.encode())

    def read_marker(self, path: str) -> str | None:
        """The text of a marker file; None when there is none."""
        filesystem, to_path = self._filesystem()
        target = to_path(self.uri(path))
        if filesystem.get_file_info(target).type != pafs.FileType.File:
            return None
        with filesystem.open_input_stream(target) as source:
            return source.read().decode()

    def delete_marker(self, path: str) -> bool:
        """Remove a marker file; returns whether there was one."""
        filesystem, to_path = self._filesystem()
        target = to_path(self.uri(path))
        if filesystem.get_file_info(target).type != pafs.FileType.File:
            return False
        filesystem.delete_file(target)
        return True

    # -- reads --------------------------------------------------------------------------

    def exists(self, table: str) -> bool:
        return self._delta().exists(self.uri(table))

    def version(self, table: str) -> int | None:
        """The table's current version, or None when it does not exist."""
        return self._delta().version(self.uri(table))

    def read(
        self,
        table: str,
        *,
        version: int | None = None,
        where: Predicate | None = None,
        columns: Sequence[str] | None = None,
    ) -> DataFrame:
        """The table (optionally at a version, filtered, only some columns) as a Spark
        DataFrame; columns left out are never read from storage."""
        return self._delta().read(self.uri(table), version=version, where=where, columns=columns)

    def read_arrow(
        self,
        table: str,
        *,
        version: int | None = None,
        where: Predicate | None = None,
        columns: Sequence[str] | None = None,
        computed: Mapping[str, Sha256] | None = None,
    ) -> pa.Table:
        """The table as Arrow: for control tables and other small reads without Spark.
        `computed` columns, by name, follow `columns` (all when None)."""
        return self._delta().read_arrow(
            self.uri(table), version=version, where=where, columns=columns, computed=computed
        )

    def count(
        self, table: str, *, where: Predicate | None = None, version: int | None = None
    ) -> int:
        """How many rows match `where` at `version` (default: the latest)."""
        return self._delta().count(self.uri(table), where=where, version=version)

    def count_from_log(
        self, table: str, *, where: Predicate | None = None, version: int | None = None
    ) -> int | None:
        """Rows matching `where` (whole partitions only) at `version`, from the log's
        per-file counts alone; None when the log cannot tell exactly."""
        return self._delta().count_from_log(self.uri(table), where=where, version=version)

    def table_facts(
        self, table: str, *, where: Predicate | None = None, fresh_as_of: int | None = None
    ) -> port.TableFacts | None:
        """Schema, version and row counts (of the table; of the partitions `where`
        selects) from one read of the log; None when the table does not exist.
        `fresh_as_of`: a snapshot at this version or later will do (after a write: its
        commit's version), which spares asking the store for newer commits."""
        return self._delta().table_facts(self.uri(table), where=where, fresh_as_of=fresh_as_of)

    def partition_files(self, table: str, *, where: Predicate) -> tuple[int, int]:
        """(files in the partitions `where` selects, files in the table): what a write
        pinned to `where` may read, and what it skips."""
        return self._delta().partition_files(self.uri(table), where=where)

    def history(self, table: str, *, limit: int | None = None) -> list[port.HistoryEntry]:
        """Commits newest first, each with the commit metadata its writer attached."""
        return self._delta().history(self.uri(table), limit=limit)

    def changes(self, table: str, *, after: int, until: int) -> pa.Table:
        """The rows the commits after version `after` up to `until` changed (see
        `DeltaEngine.changes`)."""
        return self._delta().changes(self.uri(table), after=after, until=until)

    def app_transaction_version(self, table: str, app_id: str) -> int | None:
        return self._delta().app_transaction_version(self.uri(table), app_id)

    def app_transaction_versions(self, table: str, app_ids: Sequence[str]) -> dict[str, int]:
        """The versions `table` records for these app ids (ids it never saw are left out)."""
        return self._delta().app_transaction_versions(self.uri(table), app_ids)

    def staged_parts(
        self, frame: DataFrame, column: str, *, order: Sequence[str] = ()
    ) -> StagedParts:
        """`frame`, the rows of several partitions, evaluated once, sorted by `order` and
        split by `column` in the form this engine writes from with the least work:
        delta-rs collects the frame to Arrow (each write would collect its part anyway, a
        Spark job each) and slices it; delta-spark checkpoints it and keeps each part on
        the cluster."""
        return staged_parts(frame, column, collect=self.engine == "delta-rs", order=order)

    def in_write_form(self, frame: DataFrame) -> port.Data:
        """`frame` in the form this engine writes from with the least work: delta-rs
        collects it to Arrow here, once (each write of it, or read of its columns here,
        would collect it again, a Spark job each); delta-spark keeps the frame."""
        return frame.toArrow() if self.engine == "delta-rs" else frame

    def read_in_write_form(
        self,
        table: str,
        *,
        where: Predicate | None = None,
        columns: Sequence[str] | None = None,
        computed: Mapping[str, Sha256] | None = None,
    ) -> pa.Table | DataFrame:
        """Rows of `table` in the form this engine writes from (see `in_write_form`), with
        `computed` columns after `columns`: delta-rs reads them into Arrow in this
        process, without a Spark job; delta-spark keeps them a frame on the cluster."""
        if self.engine == "delta-rs":
            return self.read_arrow(table, where=where, columns=columns, computed=computed)
        from pyspark.sql import functions as F

        added = [F.expr(sha.render("spark")).alias(name) for name, sha in (computed or {}).items()]
        return self.read(table, where=where, columns=columns).select("*", *added)

    # -- writes -------------------------------------------------------------------------

    def create(
        self,
        table: str,
        schema: pa.Schema,
        *,
        metadata: Mapping[str, Any],
        partition_by: Sequence[str] | None = None,
        table_properties: Mapping[str, str] | None = None,
    ) -> bool:
        """Create `table` without rows unless it exists; returns whether this call did.

        Created in the process (delta-rs) whatever the engine: an empty commit needs no
        executors, and on local Spark it cost a 2.4 s job. Racing creators are safe: an
        append of nothing to a table another run created changes nothing."""
        if self.exists(table):
            return False
        self.in_process().append(
            table,
            schema.empty_table(),
            metadata=metadata,
            partition_by=partition_by,
            table_properties=table_properties,
        )
        return True

    def append(
        self,
        table: str,
        data: port.Data | port.Stream,
        *,
        metadata: Mapping[str, Any],
        partition_by: Sequence[str] | None = None,
        table_properties: Mapping[str, str] | None = None,
        app_transaction: port.AppTransaction | None = None,
        merge_schema: bool = False,
    ) -> port.CommitResult:
        """Add rows. `partition_by` and `table_properties` (e.g. `delta.targetFileSize`,
        over `TABLE_DEFAULTS`) apply when this write creates the table; `merge_schema`
        adds the data's new columns to the table (rows before have them null)."""
        return self._write(
            table,
            data,
            "append",
            None,
            partition_by,
            table_properties,
            metadata,
            app_transaction,
            "merge" if merge_schema else None,
        )

    def overwrite(
        self,
        table: str,
        data: port.Data | port.Stream,
        *,
        metadata: Mapping[str, Any],
        where: Predicate | None = None,
        partition_by: Sequence[str] | None = None,
        table_properties: Mapping[str, str] | None = None,
        app_transaction: port.AppTransaction | None = None,
        replace_schema: bool = False,
        merge_schema: bool = False,
    ) -> port.CommitResult:
        """Replace the whole table, or with `where` exactly the rows it matches
        (replaceWhere). One atomic commit: readers see the old content or the new.
        `replace_schema` lets a whole-table overwrite change the table's columns too;
        `merge_schema` adds the data's new columns (as `append`'s does)."""
        if replace_schema and where is not None:
            raise ValueError(f"{table}: only a whole-table overwrite can replace the schema")
        return self._write(
            table,
            data,
            "overwrite",
            where,
            partition_by,
            table_properties,
            metadata,
            app_transaction,
            "overwrite" if replace_schema else "merge" if merge_schema else None,
        )

    def _write(
        self,
        table: str,
        data: port.Data | port.Stream,
        mode: port.WriteMode,
        where: Predicate | None,
        partition_by: Sequence[str] | None,
        table_properties: Mapping[str, str] | None,
        metadata: Mapping[str, Any],
        app_transaction: port.AppTransaction | None,
        schema_mode: port.SchemaMode | None,
    ) -> port.CommitResult:
        if isinstance(data, pa.RecordBatchReader):
            data = _once(data)
        properties = {**TABLE_DEFAULTS, **(table_properties or {})}
        result = self._commit(
            table,
            metadata,
            lambda uri, meta: self._delta().write(
                uri,
                data.make() if isinstance(data, port.Stream) else data,
                mode=mode,
                where=where,
                partition_by=partition_by,
                table_properties=properties,
                metadata=meta,
                app_transaction=app_transaction,
                schema_mode=schema_mode,
            ),
        )
        return self._with_replaced_rows(result, where) if mode == "overwrite" else result

    def _with_replaced_rows(
        self, result: port.CommitResult, where: Predicate | None
    ) -> port.CommitResult:
        """An overwrite's `rows_deleted` is the rows it replaced. Neither engine reports
        them when it drops whole files (a table, or partitions by replaceWhere): their
        count is read from the log of the version just before the commit. A predicate on
        data columns rewrites files, and the engine's own figures stand."""
        metrics = result.metrics
        if metrics["rows_deleted"] or not metrics["files_removed"] or result.version == 0:
            return result
        replaced = self.count_from_log(result.table, where=where, version=result.version - 1)
        if replaced is None:
            return result
        return replace(result, metrics={**metrics, "rows_deleted": replaced})

    def merge(
        self,
        table: str,
        source: port.Data,
        *,
        on: Predicate,
        clauses: Sequence[port.MergeClause],
        metadata: Mapping[str, Any],
        app_transaction: port.AppTransaction | None = None,
    ) -> port.CommitResult:
        """MERGE `source` (alias `s`) into the table (alias `t`) on `on`."""
        return self._commit(
            table,
            metadata,
            lambda uri, meta: self._delta().merge(
                uri,
                source,
                on=on,
                clauses=clauses,
                metadata=meta,
                app_transaction=app_transaction,
            ),
        )

    def delete(
        self, table: str, *, where: Predicate, metadata: Mapping[str, Any]
    ) -> port.CommitResult:
        return self._commit(
            table, metadata, lambda uri, meta: self._delta().delete(uri, where=where, metadata=meta)
        )

    def restore(
        self, table: str, version: int, *, metadata: Mapping[str, Any]
    ) -> port.CommitResult:
        """Make `version`'s content current again, as a new commit. Refuses, changing
        nothing, when files of that version were vacuumed."""
        self._require_restorable(table, version)
        return self._commit(
            table, metadata, lambda uri, meta: self._delta().restore(uri, version, metadata=meta)
        )

    def restore_where(
        self, table: str, version: int, *, where: Predicate, metadata: Mapping[str, Any]
    ) -> port.CommitResult:
        """Make `version`'s rows that match `where` current again and leave every other
        row as it is: those rows, read as of `version`, replace the matching ones in one
        commit (replaceWhere). Delta's RESTORE moves a whole table; this is for tables
        whose partitions are separate units (a day of visits), where undoing one must not
        undo the others. Refuses, changing nothing, when files of that version were
        vacuumed."""
        self._require_restorable(table, version)
        rows = self.read(table, version=version, where=where)
        return self.overwrite(table, rows, where=where, metadata=metadata)

    def _require_restorable(self, table: str, version: int) -> None:
        missing = self.missing_files(table, version)
        if missing:
            raise port.VersionUnavailableError(
                table,
                version,
                f"{len(missing)} of its data files were removed by VACUUM "
                f"({self._last_vacuum(table)}); versions older than that retention "
                "boundary can no longer be restored",
            )

    def compact(
        self,
        table: str,
        *,
        metadata: Mapping[str, Any],
        partition: Mapping[str, Value] | None = None,
    ) -> port.CommitResult:
        """Bin-pack small files (of one partition, if given); content is unchanged."""
        return self._commit(
            table,
            metadata,
            lambda uri, meta: self._delta().compact(uri, partition=partition, metadata=meta),
        )

    def vacuum(self, table: str, *, retention_hours: int, dry_run: bool = False) -> list[str]:
        """Delete files no version younger than `retention_hours` references; returns them.

        Whole hours, on both engines: delta-rs takes no fraction of an hour, and one engine
        rounding 0.5 h down to 0 would delete what the other keeps."""
        if isinstance(retention_hours, bool) or not isinstance(retention_hours, int):
            raise ValueError(
                f"retention_hours must be a whole number of hours: {retention_hours!r}"
            )
        if retention_hours < 0:
            raise ValueError(f"retention_hours must not be negative: {retention_hours}")
        return self._delta().vacuum(
            self.uri(table), retention_hours=retention_hours, dry_run=dry_run
        )

    # -- the commit protocol ------------------------------------------------------------

    def _commit(
        self,
        table: str,
        metadata: Mapping[str, Any],
        operation: Callable[[str, Mapping[str, Any]], port.HistoryEntry | None],
    ) -> port.CommitResult:
        uri = self.uri(table)
        engine = self._delta()
        # A token in the commit metadata identifies our commit in the history even when
        # other writers committed around it.
        token = uuid.uuid4().hex
        meta = {**metadata, "commit_token": token}
        for attempt in range(1, self.commit_attempts + 1):
            try:
                entry = operation(uri, meta)
                break
            except Exception as error:
                if not engine.is_commit_conflict(error):
                    raise
                if attempt == self.commit_attempts:
                    raise port.CommitConflictError(table, "write", attempt, error) from error
                time.sleep(min(2.0, 0.05 * 2**attempt) * (0.5 + random.random()))
        self._committed.add(table)
        if entry is None:
            # The engine decided there was nothing to commit (e.g. compacting a compact
            # table, merging an empty batch).
            return port.CommitResult(
                table, self.version(table) or 0, "NONE", port.normalize_metrics({}, "NONE")
            )
        return port.CommitResult(
            table, entry.version, entry.operation, entry.metrics, entry.engine_metrics
        )

    def sql_catalog(self) -> Catalog | None:
        """The long-lived Spark's SQL catalog, when this lakehouse is attached to it
        (SPARK_SERVER_STATE) and it serves one; else None."""
        if not self._catalog:
            from resources.spark_server import SparkServer

            described = (
                SparkServer(self.spark.server_state).description()
                if self.spark.server_state and self.spark.remote
                else None
            )
            self._catalog.append(
                Catalog(described.catalog, self.spark.remote)
                if described is not None and described.catalog
                else None
            )
        return self._catalog[0]

    def expose(self, *views: View | None) -> None:
        """Register `views` (None: a view with nothing to show yet, left out) in the SQL
        catalog with the tables this run commits to (a view whose SQL is unchanged costs
        a file check)."""
        self._exposed.update((view.name, view) for view in views if view is not None)

    def register_committed(self, warn: Callable[[str], None]) -> None:
        """Register the tables committed to through this lakehouse (and its other
        engine's), and the views exposed to it with the tables they read, in the SQL
        catalog, if there is one (resources/catalog.py): a file check each once they are
        registered. After the run's work, not at each commit: the first registration on
        a fresh server waits seconds on its metastore, and nothing the run commits
        should wait for the catalog."""
        catalog = self.sql_catalog()
        exposed = [self._exposed, *(o._exposed for o in self._through_engine.values())]
        views = list({name: view for views in exposed for name, view in views.items()}.values())
        committed = set().union(
            self._committed,
            *(o._committed for o in self._through_engine.values()),
            *(view.reads for view in views),
        )
        if catalog is None or not committed:
            return
        # A table the run dropped after writing it (a week frozen into its year) is not
        # registered: Delta would make an empty table at its location.
        standing = {table: self.uri(table) for table in sorted(committed) if self.exists(table)}
        catalog.try_ensure(
            standing, [view for view in views if set(view.reads) <= set(standing)], warn=warn
        )

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        self.register_committed(warn=context.log.warning if context.log else print)

    def _last_vacuum(self, table: str) -> str:
        for entry in self.history(table):
            # VACUUM START carries the retention setting (VACUUM END only the outcome).
            millis = entry.parameters.get("specifiedRetentionMillis")
            if entry.operation.upper().startswith("VACUUM") and millis is not None:
                return (
                    f"last vacuum: version {entry.version} at {entry.timestamp:%Y-%m-%d %H:%M} "
                    f"UTC, retention {int(millis) / 3_600_000:g} h"
                )
        return "no VACUUM recorded in the retained history"


def _once(reader: pa.RecordBatchReader) -> port.Stream:
    """A reader given as it is, as a stream that can be read once: a retried write
    refuses it rather than write nothing."""
    taken = False

    def make() -> pa.RecordBatchReader:
        nonlocal taken
        if taken:
            raise port.LakehouseError(
                "a RecordBatchReader is read once and this write is being retried; pass a "
                "Stream that makes a fresh reader instead"
            )
        taken = True
        return reader

    return port.Stream(make)


def _local_path(uri: str) -> str:
    return unquote(urlparse(uri).path) if uri.startswith("file://") else uri
