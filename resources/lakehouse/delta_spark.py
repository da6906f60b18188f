"""delta-spark engine: Delta transactions run by Spark, on the cluster's executors.

Data is read and written by Spark (DataFrame reads and writes, Delta SQL for MERGE,
DELETE, RESTORE, OPTIMIZE, VACUUM), so a table's rows never pass through this process.
Only SQL and DataFrame writes are used, not the `DeltaTable` Python API: they are the
surface classic sessions and Spark Connect share (Delta's own Connect client needs a
server plugin that is not published where our machines fetch packages).

Facts of the transaction log (does a table exist, its version, history, app
transactions, the files a version references) are read by delta-rs from storage: they
are small, need no Spark job, and this way sensors never start a JVM.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from resources.lakehouse import port
from resources.lakehouse.delta_rs import DeltaRsEngine
from resources.lakehouse.frames import frame_from_arrow
from resources.lakehouse.predicates import Predicate, Sha256, Value, eq, identifier, render

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
_TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"
_RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
# New tables take `delta.<name>` properties from these session defaults.
_PROPERTY_DEFAULTS = "spark.databricks.delta.properties.defaults."
_SAFE_PATH = re.compile(r"^[^`]+$")

# Commit metadata, app transactions and new-table properties reach Delta's SQL commands
# only through session configuration, which all threads of a session share.
_session_conf_lock = threading.Lock()


def _table_ref(table: str) -> str:
    if not _SAFE_PATH.match(table):
        raise port.LakehouseError(f"Delta table path {table!r} contains a backtick")
    return f"delta.`{table}`"


class DeltaSparkEngine(port.DeltaEngine):
    def __init__(
        self,
        *,
        spark: Callable[[], SparkSession],
        storage_options: Mapping[str, str] | None = None,
    ) -> None:
        self._spark = spark
        self._log = DeltaRsEngine(storage_options=storage_options)

    @contextmanager
    def _session_conf(self, settings: Mapping[str, str]) -> Iterator[None]:
        conf = self._spark().conf
        with _session_conf_lock:
            for key, value in settings.items():
                conf.set(key, value)
            try:
                yield
            finally:
                for key in settings:
                    conf.unset(key)

    def _commit_conf(
        self,
        metadata: Mapping[str, Any],
        app_transaction: port.AppTransaction | None = None,
        table_properties: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        settings = {_USER_METADATA: _metadata_json(metadata)}
        if app_transaction:
            settings[_TXN_APP_ID] = app_transaction.app_id
            settings[_TXN_VERSION] = str(app_transaction.version)
        for key, value in (table_properties or {}).items():
            settings[_PROPERTY_DEFAULTS + key.removeprefix("delta.")] = value
        return settings

    def _own_commit(
        self, table: str, metadata: Mapping[str, Any], app_transaction: port.AppTransaction | None
    ) -> port.HistoryEntry | None:
        """The commit carrying this operation's token. Spark skips a write whose app
        transaction the table already holds (a concurrent writer with the same version got
        there first): that is a stale write, refused like the engines' pre-check refuses it."""
        for limit in (20, 200):
            for entry in self._log.history(table, limit=limit):
                if entry.metadata.get("commit_token") == metadata.get("commit_token"):
                    return entry
        if app_transaction is not None:
            current = self._log.app_transaction_version(table, app_transaction.app_id)
            port.require_advance(table, app_transaction, current)
        return None

    def _require_advance(self, table: str, app_transaction: port.AppTransaction | None) -> None:
        if app_transaction:
            current = self._log.app_transaction_version(table, app_transaction.app_id)
            port.require_advance(table, app_transaction, current)

    def _frame(self, data: port.Data) -> DataFrame:
        import pyarrow as pa

        if isinstance(data, pa.RecordBatchReader):
            data = data.read_all()
        if isinstance(data, pa.Table):
            # Rows held in this process are few enough for one writer task: one file, as
            # delta-rs writes them, not one small file per core.
            return frame_from_arrow(self._spark(), data).coalesce(1)
        return data

    # -- log-level reads (delta-rs, no Spark job) ---------------------------------------

    def exists(self, table: str) -> bool:
        return self._log.exists(table)

    def version(self, table: str) -> int | None:
        return self._log.version(table)

    def history(self, table: str, *, limit: int | None = None) -> list[port.HistoryEntry]:
        return self._log.history(table, limit=limit)

    def forget(self, table: str) -> None:
        self._log.forget(table)

    def app_transaction_version(self, table: str, app_id: str) -> int | None:
        return self._log.app_transaction_version(table, app_id)

    def app_transaction_versions(self, table: str, app_ids: Sequence[str]) -> dict[str, int]:
        return self._log.app_transaction_versions(table, app_ids)

    def changes(self, table: str, *, after: int, until: int) -> pa.Table:
        # In the process, as the log's other reads: the changes a sensor asks for are a
        # few rows, and Spark's readChangeFeed reads the same files.
        return self._log.changes(table, after=after, until=until)

    def file_uris(self, table: str, version: int) -> list[str]:
        return self._log.file_uris(table, version)

    def partition_files(self, table: str, *, where: Predicate) -> tuple[int, int]:
        return self._log.partition_files(table, where=where)

    def count_from_log(
        self, table: str, *, where: Predicate | None = None, version: int | None = None
    ) -> int | None:
        return self._log.count_from_log(table, where=where, version=version)

    def table_facts(
        self, table: str, *, where: Predicate | None = None, fresh_as_of: int | None = None
    ) -> port.TableFacts | None:
        return self._log.table_facts(table, where=where, fresh_as_of=fresh_as_of)

    def read_arrow(
        self,
        table: str,
        *,
        version: int | None = None,
        where: Predicate | None = None,
        columns: Sequence[str] | None = None,
        computed: Mapping[str, Sha256] | None = None,
    ) -> pa.Table:
        # The port's in-process read, for control tables and other small reads.
        return self._log.read_arrow(
            table, version=version, where=where, columns=columns, computed=computed
        )

    # -- data reads (Spark) -------------------------------------------------------------

    def read(
        self,
        table: str,
        *,
        version: int | None = None,
        where: Predicate | None = None,
        columns: Sequence[str] | None = None,
    ) -> DataFrame:
        if not self.exists(table):
            raise port.TableNotFoundError(table)
        reader = self._spark().read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        frame = reader.load(table)
        if where is not None:
            frame = frame.where(where.render("spark"))
        # Parquet reads only the selected columns (Spark prunes the scan).
        return frame.select(*map(identifier, columns)) if columns else frame

    def count(
        self, table: str, *, where: Predicate | None = None, version: int | None = None
    ) -> int:
        # A count over whole partitions is a fact of the log: no Spark job.
        from_log = self._log.count_from_log(table, where=where, version=version)
        if from_log is None:
            return self.read(table, version=version, where=where).count()
        return from_log

    # -- writes (Spark) -----------------------------------------------------------------

    def write(
        self,
        table: str,
        data: port.Data,
        *,
        mode: port.WriteMode,
        where: Predicate | None,
        partition_by: Sequence[str] | None,
        table_properties: Mapping[str, str] | None,
        metadata: Mapping[str, Any],
        app_transaction: port.AppTransaction | None,
        schema_mode: port.SchemaMode | None,
    ) -> port.HistoryEntry | None:
        frame = self._frame(data)
        self._require_advance(table, app_transaction)
        writer = (
            frame.write.format("delta").mode(mode).option("userMetadata", _metadata_json(metadata))
        )
        # Predicate and partitioning go with every write, creating ones included (a
        # concurrent writer may create the table first).
        if where is not None:
            writer = writer.option("replaceWhere", where.render("spark"))
        if partition_by:
            writer = writer.partitionBy(*partition_by)
        if schema_mode:
            writer = writer.option(f"{schema_mode}Schema", "true")
        if app_transaction:
            writer = writer.option("txnAppId", app_transaction.app_id).option(
                "txnVersion", app_transaction.version
            )
        if table_properties and not self.exists(table):
            with self._session_conf(self._commit_conf(metadata, None, table_properties)):
                writer.save(table)
        else:
            writer.save(table)
        return self._own_commit(table, metadata, app_transaction)

    def merge(
        self,
        table: str,
        source: port.Data,
        *,
        on: Predicate,
        clauses: Sequence[port.MergeClause],
        metadata: Mapping[str, Any],
        app_transaction: port.AppTransaction | None,
    ) -> port.HistoryEntry | None:
        if not self.exists(table):
            raise port.TableNotFoundError(table)
        self._require_advance(table, app_transaction)
        view = f"merge_source_{uuid.uuid4().hex}"
        self._frame(source).createOrReplaceTempView(view)
        statement = (
            f"MERGE INTO {_table_ref(table)} AS t USING {view} AS s ON {on.render('spark')} "
            + " ".join(_merge_clause(clause) for clause in clauses)
        )
        try:
            with self._session_conf(self._commit_conf(metadata, app_transaction)):
                self._spark().sql(statement).collect()
        finally:
            self._spark().catalog.dropTempView(view)
        return self._own_commit(table, metadata, app_transaction)

    def delete(
        self, table: str, *, where: Predicate, metadata: Mapping[str, Any]
    ) -> port.HistoryEntry | None:
        self._sql_command(
            table, f"DELETE FROM {_table_ref(table)} WHERE {where.render('spark')}", metadata
        )
        return self._own_commit(table, metadata, None)

    def restore(
        self, table: str, version: int, *, metadata: Mapping[str, Any]
    ) -> port.HistoryEntry | None:
        statement = f"RESTORE TABLE {_table_ref(table)} TO VERSION AS OF {int(version)}"
        self._sql_command(table, statement, metadata)
        return self._own_commit(table, metadata, None)

    def compact(
        self,
        table: str,
        *,
        partition: Mapping[str, Value] | None,
        metadata: Mapping[str, Any],
    ) -> port.HistoryEntry | None:
        statement = f"OPTIMIZE {_table_ref(table)}"
        if partition:
            conditions = [eq(column, value).render("spark") for column, value in partition.items()]
            statement += " WHERE " + " AND ".join(conditions)
        self._sql_command(table, statement, metadata)
        return self._own_commit(table, metadata, None)

    def _sql_command(self, table: str, statement: str, metadata: Mapping[str, Any]) -> None:
        if not self.exists(table):
            raise port.TableNotFoundError(table)
        with self._session_conf(self._commit_conf(metadata)):
            self._spark().sql(statement).collect()

    def vacuum(self, table: str, *, retention_hours: int, dry_run: bool) -> list[str]:
        statement = f"VACUUM {_table_ref(table)} RETAIN {int(retention_hours)} HOURS"
        # The table's minimum retention guards concurrent readers; the operator's explicit
        # setting is the decision here (as with delta-rs's enforce_retention_duration).
        with self._session_conf({_RETENTION_CHECK: "false"}):
            result = self._spark().sql(statement + (" DRY RUN" if dry_run else ""))
            return [row[0] for row in result.collect()]

    def is_commit_conflict(self, error: Exception) -> bool:
        return _is_delta_conflict(error)


def _metadata_json(metadata: Mapping[str, Any]) -> str:
    # The same encoding delta-rs commits with, so history reads the same under both engines.
    return json.dumps(dict(metadata), sort_keys=True, default=str)


def _merge_clause(clause: port.MergeClause) -> str:
    condition = render(clause.condition, "spark")
    when = f" AND {condition}" if condition else ""
    if isinstance(clause, port.WhenMatchedDelete):
        return f"WHEN MATCHED{when} THEN DELETE"
    if isinstance(clause, port.WhenMatchedUpdate):
        if clause.set is None:
            return f"WHEN MATCHED{when} THEN UPDATE SET *"
        assignments = ", ".join(
            f"{identifier(c)} = {value.render('spark')}" for c, value in clause.set.items()
        )
        return f"WHEN MATCHED{when} THEN UPDATE SET {assignments}"
    if clause.values is None:
        return f"WHEN NOT MATCHED{when} THEN INSERT *"
    columns = ", ".join(identifier(c) for c in clause.values)
    values = ", ".join(value.render("spark") for value in clause.values.values())
    return f"WHEN NOT MATCHED{when} THEN INSERT ({columns}) VALUES ({values})"


# Every Delta commit conflict (ConcurrentAppend, ConcurrentDeleteRead, MetadataChanged, ...)
# is a subclass of this JVM class; its error conditions share these prefixes.
_CONFLICT_JAVA_CLASS = "org.apache.spark.sql.delta.DeltaConcurrentModificationException"
_CONFLICT_CONDITIONS = ("DELTA_CONCURRENT_", "DELTA_METADATA_CHANGED", "DELTA_PROTOCOL_CHANGED")


def _is_delta_conflict(error: BaseException) -> bool:
    """delta-spark converts its conflicts to Python classes only on some call paths
    (`DataFrameWriter.save` raises a bare Py4JJavaError), and Spark Connect sends error
    conditions, not classes: look at the JVM class hierarchy, or the error condition."""
    condition = getattr(error, "getCondition", lambda: None)()
    if condition and condition.startswith(_CONFLICT_CONDITIONS):
        return True
    java = getattr(error, "java_exception", None)
    while java is not None:
        cls = java.getClass()
        while cls is not None:
            if cls.getName() == _CONFLICT_JAVA_CLASS:
                return True
            cls = cls.getSuperclass()
        java = java.getCause()
    return False
