"""The Delta port: the records and errors every engine speaks, and the engine interface.

Pattern code talks only to `Lakehouse` (resources/lakehouse/resource.py), which delegates
to one `DeltaEngine`. Engines differ in where the work runs (delta-rs in this process,
delta-spark on the Spark cluster), never in what a caller observes.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from resources.lakehouse.predicates import (
    Assignment,
    Predicate,
    Sha256,
    Value,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    Data: TypeAlias = DataFrame | pa.Table | pa.RecordBatchReader


@dataclass(frozen=True)
class Stream:
    """Rows too many to hold at once, as a function that makes a fresh reader of them: a
    write that is retried (after a commit conflict) reads them again from the start."""

    make: Callable[[], pa.RecordBatchReader]

    @classmethod
    def of(cls, schema: pa.Schema, batches: Callable[[], Iterable[pa.RecordBatch]]) -> Stream:
        """The batches `batches()` yields, made anew for each attempt. They are pulled by
        the engine as it writes, from inside its own runtime (delta-rs): `batches` must
        not read a table; rows computed from tables are `spooled` first."""

        def make() -> pa.RecordBatchReader:
            import pyarrow as pa

            return pa.RecordBatchReader.from_batches(schema, iter(batches()))

        return cls(make)


@contextmanager
def spooled(schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> Iterator[Stream]:
    """The batches written, one at a time as they come, to an Arrow file on local disk, as
    a Stream that reads them back natively: however many rows they are, memory holds one
    batch of them, and computing them (reading tables included) is done before the write
    begins. The file is deleted on exit."""
    import pyarrow as pa

    with tempfile.TemporaryDirectory(prefix="lakehouse-spool-") as directory:
        path = os.path.join(directory, "rows.arrow")
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
            for batch in batches:
                writer.write_batch(batch)
        yield Stream(lambda: pa.ipc.open_stream(pa.OSFile(path)))


WriteMode = Literal["append", "overwrite"]
"""How a write treats the rows already there: keeps them, or replaces (those `where` selects)."""

SchemaMode = Literal["overwrite", "merge"]
"""How a write changes the table's columns: to the data's, or by adding the data's new ones."""


# -- errors ---------------------------------------------------------------------------


class LakehouseError(Exception):
    """Base of every error raised by the lakehouse port."""


class TableNotFoundError(LakehouseError):
    def __init__(self, table: str) -> None:
        super().__init__(f"Delta table {table!r} does not exist")
        self.table = table


class VersionUnavailableError(LakehouseError):
    """A table version can no longer be read or restored (vacuumed or log cleaned up)."""

    def __init__(self, table: str, version: int, reason: str) -> None:
        super().__init__(f"version {version} of Delta table {table!r} is not available: {reason}")
        self.table = table
        self.version = version


class ChangesUnavailableError(LakehouseError):
    """The changes of some versions cannot be read (a version or file is gone): read the
    table itself instead."""

    def __init__(self, table: str, after: int, until: int, reason: str) -> None:
        super().__init__(
            f"the changes of Delta table {table!r} after version {after} up to {until} "
            f"are not available: {reason}"
        )
        self.table = table


class CommitConflictError(LakehouseError):
    """Concurrent writers kept conflicting with this commit after every retry."""

    def __init__(self, table: str, operation: str, attempts: int, cause: Exception) -> None:
        super().__init__(
            f"{operation} on Delta table {table!r} conflicted with concurrent commits "
            f"{attempts} times; last error: {cause}"
        )
        self.table = table


class StaleWriteError(LakehouseError):
    """A write's app transaction does not advance the version the table already holds:
    another writer got there first, so this writer's view is stale. Nothing was written."""

    def __init__(self, table: str, app_id: str, version: int, current: int) -> None:
        super().__init__(
            f"refused a stale write to Delta table {table!r}: app transaction {app_id!r} "
            f"is already at version {current}, this write carries {version}; another "
            "writer committed after this one read the table, so its work must be redone"
        )
        self.table = table
        self.app_id = app_id
        self.version = version
        self.current = current


# -- records --------------------------------------------------------------------------


@dataclass(frozen=True)
class CommitResult:
    """What one commit did: the table version it created and its operation metrics.

    `metrics` uses one vocabulary across engines (rows_inserted, rows_updated,
    rows_deleted, rows_copied, files_added, files_removed, files_marked: files left in
    place with rows marked deleted); `engine_metrics` keeps the
    engine's own names and every other figure it reported.
    """

    table: str
    version: int
    operation: str
    metrics: Mapping[str, int]
    engine_metrics: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class HistoryEntry:
    version: int
    timestamp: dt.datetime
    operation: str
    parameters: Mapping[str, Any]
    metrics: Mapping[str, int]
    metadata: Mapping[str, Any]
    """The commit metadata our writer attached (run id, asset, partition, source facts)."""
    engine_metrics: Mapping[str, Any] = field(default_factory=dict)
    """operationMetrics under the engine's own names."""


@dataclass(frozen=True)
class Column:
    """A column of a table's Delta schema."""

    name: str
    type: str
    """Delta's type name: `string`, `long`, `date`, `array<string>`, `struct<a:long>` ..."""
    nullable: bool
    comment: str = ""
    """The column's `comment` in the schema metadata, if its writer gave one."""


@dataclass(frozen=True)
class TableFacts:
    """What the log of one version tells about a table, without reading data."""

    version: int
    columns: list[Column]
    rows: int | None
    """None when the log cannot tell exactly (files without counts, deletion vectors
    whose cardinality the engine does not list)."""
    selected_rows: int | None
    """Rows of the partitions a predicate selected (None: no predicate, or not exact)."""


@dataclass(frozen=True)
class AppTransaction:
    """Delta's idempotent-writer marker: `version` is committed atomically with the data,
    so a writer can tell after a crash whether its batch already landed.

    A write carrying one must advance it: when the table already records `version` or a
    later one for `app_id`, the write is refused with StaleWriteError and commits nothing
    (checked against the snapshot the write commits on; a concurrent commit of the same
    app id is a commit conflict, so two writers never both pass)."""

    app_id: str
    version: int


@dataclass(frozen=True)
class WhenMatchedUpdate:
    """Update matched rows; `set` maps target column -> its new value (None: every
    column from the source)."""

    condition: Predicate | None = None
    set: Mapping[str, Assignment] | None = None


@dataclass(frozen=True)
class WhenMatchedDelete:
    condition: Predicate | None = None


@dataclass(frozen=True)
class WhenNotMatchedInsert:
    """Insert unmatched source rows; `values` maps column -> its value (None: every
    column from the source)."""

    condition: Predicate | None = None
    values: Mapping[str, Assignment] | None = None


def require_advance(
    table: str, app_transaction: AppTransaction | None, current: int | None
) -> None:
    """Refuse (StaleWriteError) a write whose app transaction does not advance `current`."""
    if app_transaction is not None and current is not None and current >= app_transaction.version:
        raise StaleWriteError(table, app_transaction.app_id, app_transaction.version, current)


MergeClause = WhenMatchedUpdate | WhenMatchedDelete | WhenNotMatchedInsert
"""Clauses apply in the order given; in conditions, `t` is the target and `s` the source
(resources/lakehouse/predicates.py builds them)."""


# Engines report metrics under their own names; these map them to ours.
METRIC_NAMES: Mapping[str, str] = {
    # delta-rs
    "num_added_rows": "rows_inserted",
    "num_target_rows_inserted": "rows_inserted",
    "num_target_rows_updated": "rows_updated",
    "num_target_rows_deleted": "rows_deleted",
    "num_deleted_rows": "rows_deleted",
    "num_target_rows_copied": "rows_copied",
    "num_copied_rows": "rows_copied",
    "num_added_files": "files_added",
    "num_target_files_added": "files_added",
    "num_removed_files": "files_removed",
    "num_target_files_removed": "files_removed",
    "numFilesAdded": "files_added",
    "numFilesRemoved": "files_removed",
    "num_restored_file": "files_added",
    "num_removed_file": "files_removed",
    # delta-spark
    "numOutputRows": "rows_inserted",
    "numFiles": "files_added",  # a WRITE's files
    "numTargetRowsInserted": "rows_inserted",
    "numTargetRowsUpdated": "rows_updated",
    "numTargetRowsDeleted": "rows_deleted",
    "numDeletedRows": "rows_deleted",
    "numTargetRowsCopied": "rows_copied",
    "numCopiedRows": "rows_copied",
    "numTargetFilesAdded": "files_added",
    "numTargetFilesRemoved": "files_removed",
    "numAddedFiles": "files_added",
    "numRemovedFiles": "files_removed",
    "numRestoredFiles": "files_added",
}
FILES_MARKED = frozenset({"numTargetDeletionVectorsAdded", "numDeletionVectorsAdded"})
"""Metrics of the deletion vectors a commit wrote, one per file that kept its place and
had rows marked deleted (Delta Spark counts a vector that replaces a file's old one as
added too, and also as updated): our `files_marked`, of a MERGE, UPDATE or DELETE on a
table with deletion vectors (Delta Spark writes them; delta-rs cannot yet)."""


def normalize_metrics(engine_metrics: Mapping[str, Any], operation: str) -> dict[str, int]:
    metrics = dict.fromkeys(
        (
            "rows_inserted",
            "rows_updated",
            "rows_deleted",
            "rows_copied",
            "files_added",
            "files_removed",
            "files_marked",
        ),
        0,
    )
    for name, value in engine_metrics.items():
        ours = "files_marked" if name in FILES_MARKED else METRIC_NAMES.get(name)
        if ours is None:
            continue
        # Spark's MERGE reports numOutputRows = inserted + updated + copied: only a plain
        # write's output rows are inserts.
        if name == "numOutputRows" and operation == "MERGE":
            continue
        try:
            metrics[ours] = int(value)
        except (TypeError, ValueError):
            continue
    if operation == "WRITE" and "numCopiedRows" in engine_metrics:
        # Spark's replaceWhere on data columns counts the rows it copied out of rewritten
        # files among its output rows; delta-rs counts only the rows written.
        metrics["rows_inserted"] -= metrics["rows_copied"]
    return metrics


# -- the engine interface ---------------------------------------------------------------


class DeltaEngine(ABC):
    """One Delta implementation; `table` is a table URI.

    Every write takes commit metadata (which holds a unique `commit_token`) and returns
    the history entry of the commit it made (found by that token), or None when it
    committed nothing."""

    @abstractmethod
    def exists(self, table: str) -> bool: ...

    @abstractmethod
    def version(self, table: str) -> int | None: ...

    @abstractmethod
    def forget(self, table: str) -> None:
        """Drop what this engine keeps of `table` (its directory is being deleted)."""

    @abstractmethod
    def read(
        self,
        table: str,
        *,
        version: int | None = None,
        where: Predicate | None = None,
        columns: Sequence[str] | None = None,
    ) -> DataFrame:
        """Only `columns` (all when None) are read from storage."""

    @abstractmethod
    def read_arrow(
        self,
        table: str,
        *,
        version: int | None = None,
        where: Predicate | None = None,
        columns: Sequence[str] | None = None,
        computed: Mapping[str, Sha256] | None = None,
    ) -> pa.Table:
        """`computed` columns, by name, follow `columns` (all when None)."""

    @abstractmethod
    def count(
        self, table: str, *, where: Predicate | None = None, version: int | None = None
    ) -> int:
        """Rows matching `where` at `version` (default: the latest), without bringing them
        into Python."""

    @abstractmethod
    def count_from_log(
        self, table: str, *, where: Predicate | None = None, version: int | None = None
    ) -> int | None:
        """Rows of the files `where` selects at `version` (default: the latest), summed
        from the log's per-file row counts, less the rows deletion vectors delete, without
        reading data; None when that cannot be exact (`where` names a data column, a file
        has no count, deletion vectors whose cardinality the engine does not list)."""

    @abstractmethod
    def table_facts(
        self, table: str, *, where: Predicate | None = None, fresh_as_of: int | None = None
    ) -> TableFacts | None:
        """Schema and row counts (of the table, and of the partitions `where` selects) of
        the latest version, from one read of the log; None when there is no table.
        `fresh_as_of`: a snapshot at this version or later will do (e.g. after a write,
        its own commit's), without asking the store for newer commits."""

    @abstractmethod
    def partition_files(self, table: str, *, where: Predicate) -> tuple[int, int]:
        """(files in the partitions `where` selects, files in the table), read from the
        log; a `LakehouseError` when `where` names a column that does not partition the
        table."""

    @abstractmethod
    def write(
        self,
        table: str,
        data: Data,
        *,
        mode: WriteMode,
        where: Predicate | None,
        partition_by: Sequence[str] | None,
        table_properties: Mapping[str, str] | None,
        metadata: Mapping[str, Any],
        app_transaction: AppTransaction | None,
        schema_mode: SchemaMode | None,
    ) -> HistoryEntry | None:
        """`partition_by` and `table_properties` apply when this write creates the table.
        In the same commit, `schema_mode` "overwrite" (a whole-table overwrite only) gives
        the table the data's schema (Delta's overwriteSchema), and "merge" adds the data's
        new columns to it (mergeSchema)."""

    @abstractmethod
    def merge(
        self,
        table: str,
        source: Data,
        *,
        on: Predicate,
        clauses: Sequence[MergeClause],
        metadata: Mapping[str, Any],
        app_transaction: AppTransaction | None,
    ) -> HistoryEntry | None: ...

    @abstractmethod
    def delete(
        self, table: str, *, where: Predicate, metadata: Mapping[str, Any]
    ) -> HistoryEntry | None: ...

    @abstractmethod
    def restore(
        self, table: str, version: int, *, metadata: Mapping[str, Any]
    ) -> HistoryEntry | None: ...

    @abstractmethod
    def history(self, table: str, *, limit: int | None = None) -> list[HistoryEntry]: ...

    @abstractmethod
    def app_transaction_version(self, table: str, app_id: str) -> int | None: ...

    def app_transaction_versions(self, table: str, app_ids: Sequence[str]) -> dict[str, int]:
        """Versions of several app ids (those the table records)."""
        versions = {app_id: self.app_transaction_version(table, app_id) for app_id in app_ids}
        return {app_id: v for app_id, v in versions.items() if v is not None}

    @abstractmethod
    def vacuum(self, table: str, *, retention_hours: int, dry_run: bool) -> list[str]: ...

    @abstractmethod
    def compact(
        self,
        table: str,
        *,
        partition: Mapping[str, Value] | None,
        metadata: Mapping[str, Any],
    ) -> HistoryEntry | None: ...

    @abstractmethod
    def changes(self, table: str, *, after: int, until: int) -> pa.Table:
        """The rows each commit after version `after` up to `until` removed and added:
        the table's columns, plus `_change_type` (insert, delete, update_preimage,
        update_postimage) and `_commit_version`. From the change data feed where the table
        keeps one (`delta.enableChangeDataFeed`): the changed rows alone; else the rows of
        the files each commit removed and added (the changed rows, and the rows copied
        along with them). A `ChangesUnavailableError` when a version or file is gone."""

    @abstractmethod
    def file_uris(self, table: str, version: int) -> list[str]:
        """URIs of the data files `version` references."""

    @abstractmethod
    def is_commit_conflict(self, error: Exception) -> bool: ...
