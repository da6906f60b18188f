"""delta-spark engine: Delta transactions run by the Spark cluster (DeltaTable API).

Used where Spark has the Delta jars on its classpath (a cluster that ships them, or jar
files named by DELTA_SPARK_JARS): data never passes through this process. Written against
delta-spark's documented Python API; its contract tests skip when the jars are absent.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from resources.lakehouse import port
from resources.lakehouse.delta_rs import DeltaRsEngine
from resources.lakehouse.predicates import Predicate, Value, eq, render

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
_TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"
_RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
_SAFE_PATH = re.compile(r"^[^`]+$")

# DeltaTable operations (MERGE, DELETE, RESTORE, OPTIMIZE) take commit metadata and app
# transactions only from session configuration, which all threads of a session share.
_session_conf_lock = threading.Lock()


class DeltaSparkEngine(port.DeltaEngine):
    def __init__(self, *, spark: Callable[[], SparkSession]) -> None:
        self._spark = spark
        # Log-level facts (app transactions, the files a version references) have no public
        # delta-spark API; delta-rs reads the same transaction log without touching data.
        self._log_reader = DeltaRsEngine()

    def _delta_table(self, table: str) -> Any:
        from delta.tables import DeltaTable

        if not self.exists(table):
            raise port.TableNotFoundError(table)
        return DeltaTable.forPath(self._spark(), table)

    @contextmanager
    def _session_conf(
        self, metadata: Mapping[str, Any], app_transaction: port.AppTransaction | None = None
    ) -> Iterator[None]:
        conf = self._spark().conf
        settings = {_USER_METADATA: json.dumps(dict(metadata), sort_keys=True, default=str)}
        if app_transaction:
            settings[_TXN_APP_ID] = app_transaction.app_id
            settings[_TXN_VERSION] = str(app_transaction.version)
        with _session_conf_lock:
            for key, value in settings.items():
                conf.set(key, value)
            try:
                yield
            finally:
                for key in settings:
                    conf.unset(key)

    def exists(self, table: str) -> bool:
        from delta.tables import DeltaTable

        return DeltaTable.isDeltaTable(self._spark(), table)

    def version(self, table: str) -> int | None:
        if not self.exists(table):
            return None
        return int(self._delta_table(table).history(1).select("version").first()[0])

    def read(
        self, table: str, *, version: int | None = None, where: Predicate | None = None
    ) -> DataFrame:
        if not self.exists(table):
            raise port.TableNotFoundError(table)
        reader = self._spark().read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        frame = reader.load(table)
        return frame.where(where.render("spark")) if where is not None else frame

    def read_arrow(
        self, table: str, *, version: int | None = None, where: Predicate | None = None
    ) -> pa.Table:
        return self.read(table, version=version, where=where).toArrow()

    def count(self, table: str, *, where: Predicate | None = None) -> int:
        return self.read(table, where=where).count()

    def _frame(self, data: port.Data) -> DataFrame:
        import pyarrow as pa

        if isinstance(data, pa.RecordBatchReader):
            data = data.read_all()
        return self._spark().createDataFrame(data) if isinstance(data, pa.Table) else data

    def write(
        self,
        table: str,
        data: port.Data,
        *,
        mode: str,
        where: Predicate | None,
        partition_by: Sequence[str] | None,
        table_properties: Mapping[str, str] | None,
        metadata: Mapping[str, Any],
        app_transaction: port.AppTransaction | None,
    ) -> port.HistoryEntry | None:
        frame = self._frame(data)
        exists = self.exists(table)
        self._require_advance(table, app_transaction)
        if not exists and table_properties:
            self._create(table, frame, partition_by, table_properties)
            exists = True
        writer = (
            frame.write.format("delta")
            .mode(mode)
            .option("userMetadata", json.dumps(dict(metadata), sort_keys=True, default=str))
        )
        # Predicate and partitioning go with every write, creating ones included (a
        # concurrent writer may create the table first).
        if where is not None:
            writer = writer.option("replaceWhere", where.render("spark"))
        if partition_by:
            writer = writer.partitionBy(*partition_by)
        if app_transaction:
            writer = writer.option("txnAppId", app_transaction.app_id).option(
                "txnVersion", app_transaction.version
            )
        writer.save(table)
        return None

    def _create(
        self,
        table: str,
        frame: DataFrame,
        partition_by: Sequence[str] | None,
        table_properties: Mapping[str, str],
    ) -> None:
        from delta.tables import DeltaTable

        builder = (
            DeltaTable.createIfNotExists(self._spark()).location(table).addColumns(frame.schema)
        )
        if partition_by:
            builder = builder.partitionedBy(*partition_by)
        for key, value in table_properties.items():
            builder = builder.property(key, value)
        builder.execute()

    def merge(
        self,
        table: str,
        source: port.Data,
        *,
        on: str,
        clauses: Sequence[port.MergeClause],
        metadata: Mapping[str, Any],
        app_transaction: port.AppTransaction | None,
    ) -> port.HistoryEntry | None:
        self._require_advance(table, app_transaction)
        builder = self._delta_table(table).alias("t").merge(self._frame(source).alias("s"), on)
        for clause in clauses:
            condition = render(clause.condition, "spark")
            if isinstance(clause, port.WhenMatchedDelete):
                builder = builder.whenMatchedDelete(condition=condition)
            elif isinstance(clause, port.WhenMatchedUpdate):
                builder = (
                    builder.whenMatchedUpdateAll(condition=condition)
                    if clause.set is None
                    else builder.whenMatchedUpdate(condition=condition, set=dict(clause.set))
                )
            else:
                builder = (
                    builder.whenNotMatchedInsertAll(condition=condition)
                    if clause.values is None
                    else builder.whenNotMatchedInsert(
                        condition=condition, values=dict(clause.values)
                    )
                )
        with self._session_conf(metadata, app_transaction):
            builder.execute()
        return None

    def delete(
        self, table: str, *, where: Predicate, metadata: Mapping[str, Any]
    ) -> port.HistoryEntry | None:
        delta_table = self._delta_table(table)
        with self._session_conf(metadata):
            delta_table.delete(where.render("spark"))
        return None

    def restore(
        self, table: str, version: int, *, metadata: Mapping[str, Any]
    ) -> port.HistoryEntry | None:
        delta_table = self._delta_table(table)
        with self._session_conf(metadata):
            delta_table.restoreToVersion(version)
        return None

    def history(self, table: str, *, limit: int | None = None) -> list[port.HistoryEntry]:
        rows = self._delta_table(table).history(limit).collect()
        entries = []
        for row in rows:
            operation = row["operation"]
            engine_metrics = dict(row["operationMetrics"] or {})
            timestamp = row["timestamp"]
            if timestamp.tzinfo is None:
                timestamp = timestamp.replace(tzinfo=dt.UTC)
            entries.append(
                port.HistoryEntry(
                    version=int(row["version"]),
                    timestamp=timestamp,
                    operation=operation,
                    parameters=dict(row["operationParameters"] or {}),
                    metrics=port.normalize_metrics(engine_metrics, operation),
                    metadata=json.loads(row["userMetadata"]) if row["userMetadata"] else {},
                    engine_metrics=engine_metrics,
                )
            )
        return entries

    def _require_advance(self, table: str, app_transaction: port.AppTransaction | None) -> None:
        # Checked before the write; a writer racing past this check with the same version
        # is skipped by Delta itself (txnAppId/txnVersion make Spark writes idempotent).
        if app_transaction and self.exists(table):
            current = self.app_transaction_version(table, app_transaction.app_id)
            port.require_advance(table, app_transaction, current)

    def app_transaction_version(self, table: str, app_id: str) -> int | None:
        return self._log_reader.app_transaction_version(table, app_id)

    def vacuum(self, table: str, *, retention_hours: float, dry_run: bool) -> list[str]:
        if not _SAFE_PATH.match(table):
            raise port.LakehouseError(f"cannot vacuum {table!r}: a backtick in the path")
        spark = self._spark()
        spark.conf.set(_RETENTION_CHECK, "false")
        try:
            statement = f"VACUUM delta.`{table}` RETAIN {float(retention_hours)} HOURS"
            result = spark.sql(statement + (" DRY RUN" if dry_run else ""))
            return [row[0] for row in result.collect()]
        finally:
            spark.conf.unset(_RETENTION_CHECK)

    def compact(
        self,
        table: str,
        *,
        partition: Mapping[str, Value] | None,
        metadata: Mapping[str, Any],
    ) -> port.HistoryEntry | None:
        optimizer = self._delta_table(table).optimize()
        if partition:
            conditions = [eq(column, value) for column, value in partition.items()]
            optimizer = optimizer.where(" AND ".join(c.render("spark") for c in conditions))
        with self._session_conf(metadata):
            optimizer.executeCompaction()
        return None

    def missing_files(self, table: str, version: int) -> list[str]:
        return self._log_reader.missing_files(table, version)

    def is_commit_conflict(self, error: Exception) -> bool:
        from delta import exceptions as delta_errors

        conflicts = (
            delta_errors.DeltaConcurrentModificationException,
            delta_errors.ConcurrentWriteException,
            delta_errors.MetadataChangedException,
            delta_errors.ProtocolChangedException,
            delta_errors.ConcurrentAppendException,
            delta_errors.ConcurrentDeleteReadException,
            delta_errors.ConcurrentDeleteDeleteException,
            delta_errors.ConcurrentTransactionException,
        )
        return isinstance(error, conflicts)
