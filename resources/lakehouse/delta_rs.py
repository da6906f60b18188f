"""delta-rs engine: Delta transactions in this process through the `deltalake` package.

The embedded default: it needs no JVM jars, so sensors and small control tables use it
without Spark. Reads go through `QueryBuilder` (DataFusion): the pyarrow-dataset read path
(`to_pyarrow_table`, `to_pandas`) was seen to abort the interpreter at exit on our build
machines, and QueryBuilder also prunes partitions from the predicate.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import (
    CommitProperties,
    DeltaTable,
    PostCommitHookProperties,
    QueryBuilder,
    Transaction,
    write_deltalake,
)
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from resources.lakehouse import port
from resources.lakehouse.frames import frame_from_arrow, is_arrow
from resources.lakehouse.predicates import (
    And,
    Assignment,
    Compare,
    In,
    Or,
    Predicate,
    Sha256,
    Value,
    identifier,
    partition_text,
    render,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def _as_arrow(data: port.Data) -> pa.Table | pa.RecordBatchReader:
    """Arrow data with every column nullable. Spark creates Delta tables with nullable
    columns whatever its DataFrame says; writing the same here keeps the schemas of the
    two engines' tables identical, and either engine can write the other's tables."""
    arrow = data if is_arrow(data) else data.toArrow()
    schema = pa.schema(
        [f.with_nullable(True) for f in arrow.schema], metadata=arrow.schema.metadata
    )
    return arrow if schema == arrow.schema else arrow.cast(schema)


def _plain_types(table: pa.Table) -> pa.Table:
    """DataFusion hands back view types (Utf8View); Spark and older readers want plain
    strings and binaries."""
    fields = []
    for f in table.schema:
        if pa.types.is_string_view(f.type):
            f = f.with_type(pa.string())
        elif pa.types.is_binary_view(f.type):
            f = f.with_type(pa.binary())
        fields.append(f)
    return table.cast(pa.schema(fields))


def _commit_properties(
    metadata: Mapping[str, Any], app_transaction: port.AppTransaction | None = None
) -> CommitProperties:
    # Stored as `userMetadata`, the commitInfo field Spark writes too, so history reads the
    # same under both engines.
    return CommitProperties(
        custom_metadata={"userMetadata": _user_metadata(metadata)},
        app_transactions=(
            [Transaction(app_transaction.app_id, app_transaction.version)]
            if app_transaction
            else None
        ),
    )


def _user_metadata(metadata: Mapping[str, Any]) -> str:
    return json.dumps(dict(metadata), sort_keys=True, default=str)


DEFAULT_CHECKPOINT_INTERVAL = 100
"""delta-rs's checkpoint interval when a table sets no `delta.checkpointInterval`."""


def _post_commit(target: DeltaTable | None) -> PostCommitHookProperties:
    """Checkpoints as the table says; expired log files cleaned only by a commit that
    writes a checkpoint, as Delta Spark does, and then as the table's
    `delta.enableExpiredLogCleanup` says. By default delta-rs cleans after every commit,
    which lists and stats the whole `_delta_log`: an append at version 1,000 took 98 ms
    with it and 14 ms without, and a range run paid it once per partition."""
    if target is None:
        return PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False)
    checkpoints = (target.version() + 1) % _checkpoint_interval(target) == 0
    return PostCommitHookProperties(
        create_checkpoint=True, cleanup_expired_logs=None if checkpoints else False
    )


def _checkpoint_interval(delta: DeltaTable) -> int:
    interval = delta.metadata().configuration.get("delta.checkpointInterval")
    return int(interval or DEFAULT_CHECKPOINT_INTERVAL)


_ARROW_COMPARISONS = {
    "=": pc.equal,
    "<>": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}


def _partition_mask(predicate: Predicate, partitions: pa.Table) -> pa.ChunkedArray | None:
    """Which files (rows of `_add_actions`) `predicate` keeps, when it names
    partition columns only (None otherwise). A file's partition value is one value for
    all its rows, so the predicate holds for all of a kept file's rows or for none."""
    if isinstance(predicate, And | Or):
        masks = [_partition_mask(part, partitions) for part in predicate.parts]
        if any(mask is None for mask in masks):
            return None
        combine = pc.and_kleene if isinstance(predicate, And) else pc.or_kleene
        result = pa.chunked_array(
            [pa.array([isinstance(predicate, And)] * partitions.num_rows, pa.bool_())]
        )
        for mask in masks:
            result = combine(result, mask)
        return result
    if not isinstance(predicate, Compare | In):
        return None
    column = f"partition.{predicate.column}"
    if column not in partitions.column_names:
        return None
    values = partitions.column(column)
    try:
        if isinstance(predicate, In):
            return pc.is_in(values, value_set=pa.array(predicate.values, type=values.type))
        if isinstance(predicate.value, dt.datetime) or predicate.op not in _ARROW_COMPARISONS:
            return None
        value = pa.scalar(predicate.value, type=values.type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return None  # a value of another type than the column's: let the query decide
    return _ARROW_COMPARISONS[predicate.op](values, value)


# How many commits racing writers may have stacked on a table we just created.
_CREATION_RACE_DEPTH = 50
_REOPEN_AFTER = 32
"""Commits a kept snapshot is brought forward by before the table is opened anew. delta-rs
keeps what each incremental update read, and every later write on that snapshot slows
down with it (measured on a partition's replaceWhere: 5 ms at first, 31 ms after 360
commits), where a table opened anew starts from its latest checkpoint (about 6 ms a write
over the same 360 commits when reopened every 20 to 50). That was measured at delta-rs's
checkpoint interval of 100, which tables made before `TABLE_DEFAULTS` keep; at the 10 the
lakehouse now writes into a table, reopening every 8 to 32 commits measured the same."""


class DeltaRsEngine(port.DeltaEngine):
    def __init__(
        self,
        *,
        spark: Callable[[], SparkSession] | None = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> None:
        self._spark = spark
        self._storage_options = dict(storage_options) if storage_options else None
        # Each table's latest snapshot, brought up to date before every use but a commit
        # on this engine's own last one (`_own_tips`): reading the commits since the last
        # use costs a listing of the log, where opening the table anew reads its
        # checkpoint and every commit after it, for each of the dozen operations a
        # partition's write makes. A table dropped through the lakehouse is
        # forgotten; one deleted by hand and created again while a run is going is not
        # (delta-rs brings a snapshot of a deleted table "up to date" without a word, so
        # writes still ask the store whether the table exists first).
        self._latest: dict[str, DeltaTable] = {}
        self._opened_at: dict[str, int] = {}
        """The version each kept snapshot was opened at (see _REOPEN_AFTER)."""
        self._app_versions: dict[str, tuple[int, dict[str, int | None]]] = {}
        """Per table, app transactions already looked up, as of a table version. delta-rs
        finds an app id's version by reading the log from its checkpoint on, each time
        (9 ms a lookup at 364 files, growing with the table): a range run checks one app
        id a partition, and every commit since it last looked is usually its own."""
        self._own_tips: dict[str, int] = {}
        """Per table, the version this engine's last write or merge committed. The next
        write or merge commits on the snapshot that commit left, without asking the log
        for newer commits first (a listing of it: 3 ms a partition of a range run at 364
        commits, growing with the log): Delta's optimistic concurrency checks the commits
        since then as it commits, and refuses a commit that a newer one carrying the same
        app id, or touching the files it read or replaces, makes wrong. The refused
        commit is retried (the lakehouse's commit loop) on a snapshot brought up to date."""
        self._pinned: dict[str, DeltaTable] = {}
        """Per table, the last snapshot opened at a version asked for. A run that pins the
        version it found reads at it many times (a count per day of a range): opened anew
        each time, 364 counts took 6.1 s against 0.20 s kept. A snapshot at a version never
        changes; one of a table dropped through the lakehouse is forgotten."""

    def forget(self, table: str) -> None:
        self._latest.pop(table, None)
        self._pinned.pop(table, None)
        self._opened_at.pop(table, None)
        self._app_versions.pop(table, None)
        self._own_tips.pop(table, None)

    def _app_version(self, table: str, snapshot: DeltaTable, app_id: str) -> int | None:
        """`app_id`'s version in `snapshot` (the table's latest), from what was looked up
        or committed here when no other writer has committed since."""
        version = snapshot.version()
        known_at, known = self._app_versions.get(table, (None, {}))
        if known_at != version:
            known = {}
            self._app_versions[table] = (version, known)
        if app_id not in known:
            known[app_id] = snapshot.transaction_version(app_id)
        return known[app_id]

    def _committed(
        self,
        table: str,
        commit: port.HistoryEntry | None,
        app_transaction: port.AppTransaction | None,
    ) -> port.HistoryEntry | None:
        """Carry the app transactions known before `commit` past it: when it is the only
        commit since they were read, they changed only by its own app transaction."""
        known_at, known = self._app_versions.pop(table, (None, {}))
        if commit is not None and known_at == commit.version - 1:
            if app_transaction is not None:
                known[app_transaction.app_id] = app_transaction.version
            self._app_versions[table] = (commit.version, known)
        if commit is not None:
            self._own_tips[table] = commit.version
        return commit

    def _target(self, table: str) -> DeltaTable:
        """The snapshot a write or merge of `table` commits on (see `_own_tips`)."""
        return self._table(table, fresh_as_of=self._own_tips.get(table))

    def _refused(self, table: str) -> None:
        """A commit of `table` lost a race: its retry starts from the table's latest."""
        self._own_tips.pop(table, None)

    def _table(
        self, table: str, version: int | None = None, *, fresh_as_of: int | None = None
    ) -> DeltaTable:
        """The table at `version`, else its latest snapshot: the one kept from the last
        call, brought up to date, or as it is when it is already at `fresh_as_of` or
        later (a write leaves its snapshot at its own commit: nothing to ask the store).
        A read at `version` is served by the snapshot the last one opened when that is at
        `version` (never by the latest one, which a later call brings up to date)."""
        if version is not None and (pinned := self._pinned.get(table)) is not None:
            if pinned.version() == version:
                return pinned
        if version is None and (latest := self._latest.get(table)) is not None:
            if fresh_as_of is None or latest.version() < fresh_as_of:
                try:
                    latest.update_incremental()
                except (DeltaError, OSError):
                    self.forget(table)  # gone or replaced under us: open it anew
                    latest = None
            if latest is not None:
                if latest.version() - self._opened_at[table] < _REOPEN_AFTER:
                    return latest
                del self._latest[table]  # reopened below, at its latest version
        try:
            delta = DeltaTable(table, version=version, storage_options=self._storage_options)
        except TableNotFoundError as e:
            if version is not None and self.exists(table):
                # delta-rs says "not found" for a version whose log entry is gone.
                raise port.VersionUnavailableError(table, version, str(e)) from e
            raise port.TableNotFoundError(table) from e
        except DeltaError as e:
            if version is not None:
                raise port.VersionUnavailableError(table, version, str(e)) from e
            raise
        if version is None:
            self._latest[table] = delta
            self._opened_at[table] = delta.version()
        else:
            self._pinned[table] = delta
        return delta

    def exists(self, table: str) -> bool:
        return DeltaTable.is_deltatable(table, storage_options=self._storage_options)

    def version(self, table: str) -> int | None:
        return self._table(table).version() if self.exists(table) else None

    def read_arrow(
        self,
        table: str,
        *,
        version: int | None = None,
        where: Predicate | None = None,
        columns: Sequence[str] | None = None,
        computed: Mapping[str, Sha256] | None = None,
    ) -> pa.Table:
        selected = [f'"{name}"' for name in map(identifier, columns)] if columns else ["*"]
        selected += [
            f'{expression.render("datafusion")} AS "{identifier(name)}"'
            for name, expression in (computed or {}).items()
        ]
        delta = self._table(table, version)
        query = f"SELECT {', '.join(selected)} FROM t"
        if where is not None:
            query += f" WHERE {where.render('datafusion')}"
        result = QueryBuilder().register("t", delta).execute(query)
        return _plain_types(pa.table(result.read_all()))

    def partition_files(self, table: str, *, where: Predicate) -> tuple[int, int]:
        """(files of the partitions `where` selects, files of the table), from the log."""
        delta = self._table(table)
        files = _files_selected(delta, where)
        if files is None:
            raise port.LakehouseError(
                f"{where.render('datafusion')} names columns that do not partition {table} "
                f"(partitioned by {', '.join(delta.metadata().partition_columns) or 'nothing'})"
            )
        every, selected = files
        return selected.num_rows, every.num_rows

    def count_from_log(
        self, table: str, *, where: Predicate | None = None, version: int | None = None
    ) -> int | None:
        return _rows_from_log(self._table(table, version), where)

    def table_facts(
        self, table: str, *, where: Predicate | None = None, fresh_as_of: int | None = None
    ) -> port.TableFacts | None:
        try:
            delta = self._table(table, fresh_as_of=fresh_as_of)
        except port.TableNotFoundError:
            return None
        # One snapshot, one list of files: the table's count and the partition's.
        files = _add_actions(delta)
        selected = None
        if where is not None and _on_partitions(delta, where):
            selected = _in_partitions(files, where)
        return port.TableFacts(
            delta.version(),
            _columns(delta),
            _sum_rows(delta, files),
            None if selected is None else _sum_rows(delta, selected),
        )

    def count(
        self, table: str, *, where: Predicate | None = None, version: int | None = None
    ) -> int:
        from_log = self.count_from_log(table, where=where, version=version)
        if from_log is not None:
            return from_log
        query = "SELECT count(*) AS n FROM t"
        if where is not None:
            query += f" WHERE {where.render('datafusion')}"
        result = QueryBuilder().register("t", self._table(table, version)).execute(query)
        return pa.table(result.read_all()).column("n")[0].as_py()

    def read(
        self,
        table: str,
        *,
        version: int | None = None,
        where: Predicate | None = None,
        columns: Sequence[str] | None = None,
    ) -> DataFrame:
        if self._spark is None:
            raise port.LakehouseError("this lakehouse was built without Spark; use read_arrow")
        arrow = self.read_arrow(table, version=version, where=where, columns=columns)
        return frame_from_arrow(self._spark(), arrow)

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
        try:
            target: DeltaTable | None = self._target(table)
        except port.TableNotFoundError:
            target = None
        if target is not None and app_transaction:
            port.require_advance(
                table, app_transaction, self._app_version(table, target, app_transaction.app_id)
            )
        try:
            write_deltalake(  # type: ignore[misc]  # too many unions to check the overloads
                target if target is not None else table,
                _as_arrow(data),
                mode=mode,  # type: ignore[arg-type]  # overloads split modes; both take these
                schema_mode=schema_mode,
                # The predicate and partitioning go with every write, creating ones
                # included: a writer that saw no table may find one created by a
                # concurrent writer by the time it commits, and must then still replace
                # only its own window.
                predicate=render(where, "datafusion"),
                partition_by=list(partition_by) if partition_by else None,
                configuration=(
                    None if target is not None or not table_properties else dict(table_properties)
                ),
                storage_options=self._storage_options,
                commit_properties=_commit_properties(metadata, app_transaction),
                post_commithook_properties=_post_commit(target),
            )
        except CommitFailedError:
            self._refused(table)
            raise
        if target is not None:
            return self._committed(table, _own_commit(target, metadata), app_transaction)
        return _own_commit(self._table(table), metadata, depth=_CREATION_RACE_DEPTH)

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
        target = self._target(table)
        if app_transaction:
            port.require_advance(
                table, app_transaction, self._app_version(table, target, app_transaction.app_id)
            )
        merger = target.merge(
            _as_arrow(source),
            on.render("datafusion"),
            source_alias="s",
            target_alias="t",
            commit_properties=_commit_properties(metadata, app_transaction),
            post_commithook_properties=_post_commit(target),
        )
        for clause in clauses:
            condition = render(clause.condition, "datafusion")
            if isinstance(clause, port.WhenMatchedDelete):
                merger = merger.when_matched_delete(predicate=condition)
            elif isinstance(clause, port.WhenMatchedUpdate):
                merger = (
                    merger.when_matched_update_all(predicate=condition)
                    if clause.set is None
                    else merger.when_matched_update(_assignments(clause.set), predicate=condition)
                )
            else:
                merger = (
                    merger.when_not_matched_insert_all(predicate=condition)
                    if clause.values is None
                    else merger.when_not_matched_insert(
                        _assignments(clause.values), predicate=condition
                    )
                )
        try:
            merger.execute()
        except CommitFailedError:
            self._refused(table)
            raise
        return self._committed(table, _own_commit(target, metadata), app_transaction)

    def delete(
        self, table: str, *, where: Predicate, metadata: Mapping[str, Any]
    ) -> port.HistoryEntry | None:
        target = self._table(table)
        target.delete(
            where.render("datafusion"),
            commit_properties=_commit_properties(metadata),
            post_commithook_properties=_post_commit(target),
        )
        return _own_commit(target, metadata)

    def restore(
        self, table: str, version: int, *, metadata: Mapping[str, Any]
    ) -> port.HistoryEntry | None:
        target = self._table(table)
        target.restore(
            version,
            commit_properties=_commit_properties(metadata),
            post_commithook_properties=_post_commit(target),
        )
        return _own_commit(target, metadata)

    def history(self, table: str, *, limit: int | None = None) -> list[port.HistoryEntry]:
        return [_history_entry(raw) for raw in self._table(table).history(limit)]

    def app_transaction_version(self, table: str, app_id: str) -> int | None:
        if not self.exists(table):
            return None
        return self._app_version(table, self._table(table), app_id)

    def app_transaction_versions(self, table: str, app_ids: Sequence[str]) -> dict[str, int]:
        if not self.exists(table):
            return {}
        snapshot = self._table(table)  # one snapshot for all ids
        versions = {app_id: self._app_version(table, snapshot, app_id) for app_id in app_ids}
        return {app_id: v for app_id, v in versions.items() if v is not None}

    def vacuum(self, table: str, *, retention_hours: int, dry_run: bool) -> list[str]:
        return self._table(table).vacuum(
            retention_hours=retention_hours,
            dry_run=dry_run,
            # The table's own minimum retention is a guard for concurrent readers; the
            # operator's explicit setting is the decision here.
            enforce_retention_duration=False,
            # Lite, never `full=True`: delta-rs 1.6's full mode deletes the deletion-vector
            # files the table still reads (checked: the table then fails to read). Lite
            # leaves the vectors of marked files alone, those no longer read as well.
        )

    def compact(
        self,
        table: str,
        *,
        partition: Mapping[str, Value] | None,
        metadata: Mapping[str, Any],
    ) -> port.HistoryEntry | None:
        filters = None
        if partition:
            # delta-rs takes partition filters as (column, op, string value) triples.
            filters = [(column, "=", partition_text(v)) for column, v in partition.items()]
        target = self._table(table)
        target.optimize.compact(
            partition_filters=filters,
            commit_properties=_commit_properties(metadata),
            post_commithook_properties=_post_commit(target),
        )
        return _own_commit(target, metadata)

    def changes(self, table: str, *, after: int, until: int) -> pa.Table:
        try:
            feed = self._table(table).load_cdf(starting_version=after + 1, ending_version=until)
            return pa.table(feed.read_all())
        # A file gone comes out of the stream as a bare Exception (through Arrow's C data
        # interface), not as a DeltaError.
        except Exception as e:
            raise port.ChangesUnavailableError(table, after, until, str(e)) from e

    def file_uris(self, table: str, version: int) -> list[str]:
        latest = self._latest.get(table)
        if latest is not None and latest.version() == version:
            return latest.file_uris()  # the snapshot at hand: no log to read again
        return self._table(table, version).file_uris()

    def is_commit_conflict(self, error: Exception) -> bool:
        return isinstance(error, CommitFailedError)


def _files_selected(delta: DeltaTable, where: Predicate | None) -> tuple[pa.Table, pa.Table] | None:
    """The add actions (`_add_actions`) of the table's files and of the files `where`
    selects, when it names partition columns only (None otherwise, before the add
    actions are loaded)."""
    if where is not None and not _on_partitions(delta, where):
        return None
    files = _add_actions(delta)
    selected = _in_partitions(files, where)
    return None if selected is None else (files, selected)


def _add_actions(delta: DeltaTable) -> pa.Table:
    """The table's files: `path`, `size_bytes`, `modification_time`, `num_records` and
    each partition value as `partition.<column>`. Read unflattened, then the partition
    struct flattened alone: delta-rs flattening every column's statistics costs ten times
    as much (10 ms against 1 ms a call at 364 files, paid once per partition written)."""
    actions = pa.table(delta.get_add_actions(flatten=False))
    columns = {
        name: actions.column(name)
        for name in ("path", "size_bytes", "modification_time", "num_records")
    }
    if "partition" in actions.column_names:
        partition = actions.column("partition")
        for field in partition.type:
            columns[f"partition.{field.name}"] = pc.struct_field(partition, field.name)
    return pa.table(columns)


def _assignments(assignments: Mapping[str, Assignment]) -> dict[str, str]:
    return {identifier(c): value.render("datafusion") for c, value in assignments.items()}


def _on_partitions(delta: DeltaTable, where: Predicate) -> bool:
    return where.columns() <= set(delta.metadata().partition_columns)


def _in_partitions(files: pa.Table, where: Predicate | None) -> pa.Table | None:
    """The add actions of the partitions `where` selects (None: it cannot tell)."""
    if where is None or files.num_rows == 0:
        return files
    mask = _partition_mask(where, files)
    return None if mask is None else files.filter(pc.fill_null(mask, False))


def _columns(delta: DeltaTable) -> list[port.Column]:
    return [
        port.Column(
            field.name,
            _type_name(json.loads(field.type.to_json())),
            field.nullable,
            str(field.metadata.get("comment", "")),
        )
        for field in delta.schema().fields
    ]


def _rows_from_log(delta: DeltaTable, where: Predicate | None) -> int | None:
    """Rows of the files `where` selects, summed from the log's per-file counts."""
    selection = _files_selected(delta, where)
    return None if selection is None else _sum_rows(delta, selection[1])


def _sum_rows(delta: DeltaTable, files: pa.Table) -> int | None:
    """Rows of `files` of `delta` from the log: their counts, or None when the log cannot
    tell (a file without one, or a table with deletion vectors, whose files' counts
    include the rows their vectors delete: delta-rs lists a snapshot's files with their
    counts but not their vectors' cardinality, deltalake 1.6, so such a table is counted
    by a query)."""
    if files.num_rows == 0:
        return 0
    rows = files.column("num_records")
    if rows.null_count or "deletionVectors" in (delta.protocol().writer_features or []):
        return None
    return pc.sum(rows).as_py() or 0


def _history_entry(raw: Mapping[str, Any]) -> port.HistoryEntry:
    operation = raw.get("operation", "")
    engine_metrics = raw.get("operationMetrics") or {}
    return port.HistoryEntry(
        version=int(raw["version"]),
        timestamp=dt.datetime.fromtimestamp(raw["timestamp"] / 1000, dt.UTC),
        operation=operation,
        parameters=raw.get("operationParameters") or {},
        metrics=port.normalize_metrics(engine_metrics, operation),
        metadata=_parse_user_metadata(raw.get("userMetadata")),
        engine_metrics=engine_metrics,
    )


def _own_commit(
    target: DeltaTable, metadata: Mapping[str, Any], *, depth: int = 1
) -> port.HistoryEntry | None:
    """The commit this operation made: after it, `target`'s snapshot is that commit (a
    concurrent commit after ours is not in it), so its newest history entry is ours,
    which the commit token confirms. A table loaded afresh (after a write that created
    it) may hold racing commits above ours: look `depth` commits deep. None when the
    operation committed nothing."""
    for raw in target.history(depth):
        entry = _history_entry(raw)
        if entry.metadata.get("commit_token") == metadata.get("commit_token"):
            return entry
    return None


def _parse_user_metadata(raw: str | None) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError:
        return {"userMetadata": raw}
    return parsed if isinstance(parsed, dict) else {"userMetadata": parsed}


def _type_name(delta_type: Any) -> str:
    """A Delta schema type (its JSON form) as Delta writes it in DDL."""
    if isinstance(delta_type, str):
        return delta_type
    kind = delta_type["type"]
    if kind == "array":
        return f"array<{_type_name(delta_type['elementType'])}>"
    if kind == "map":
        return f"map<{_type_name(delta_type['keyType'])},{_type_name(delta_type['valueType'])}>"
    if kind == "struct":
        fields = ",".join(f"{f['name']}:{_type_name(f['type'])}" for f in delta_type["fields"])
        return f"struct<{fields}>"
    return str(kind)
