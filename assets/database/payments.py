"""Idempotent inserts that verify what they skip: `payments`, insert-if-absent keyed by
`idempotency_key`.

A key that is already stored (from any day) or repeated in the batch is a replay only if
it says the same thing: its typed payload is compared with the stored one (digests first,
then column by column where digests differ), every column but those set as mutable.
Identical: skipped and counted as `replayed`. Different: the run fails with
IdempotencyConflictError naming each key and column, and nothing of the batch is
committed; the conflicts are kept in `payments_conflicts` and shown by an asset check.

Validation and insert form one optimistic transaction: every payments write advances the
Delta app transaction `payments`, and a write whose validation read an older snapshot is
refused by Delta (StaleWriteError) and validated again, so a key inserted by a concurrent
run between the check and the commit can never slip in unchecked.
"""

import datetime as dt
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import dagster as dg
import pyarrow as pa
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from assets.catalog import RESTORE_WHOLE_TABLE, declared
from assets.database.payments_source import (
    AMOUNT_TYPE,
    DIGEST,
    KEY,
    PAYLOAD_COLUMNS,
    day_folder,
    folder_day,
    parse_payments,
    shown,
)
from assets.materialization import commit_metadata, materialization_metadata, skipped_metadata
from assets.partition_range import SINGLE_RUN, materialize_partitions, parse_day, run_span
from assets.source_files import SourceDataError, SourceDataErrors
from resources import Lakehouse, LandingZone, SparkResource
from resources.lakehouse import AppTransaction, CommitResult, StaleWriteError
from resources.lakehouse.predicates import between
from resources.landing import FileStat, Fingerprint

PAYMENTS = "payments"
PAYMENT_CONFLICTS = "payments_conflicts"
WRITER_APP_ID = "payments"
"""The Delta app transaction every payments write advances (see the module docstring)."""
WRITE_ATTEMPTS = 5
NO_CONFLICTS = "no_idempotency_conflicts"
MAX_NAMED_CONFLICTS = 20
daily_payments = dg.DailyPartitionsDefinition(start_date="2024-01-01")
PAYMENTS_SCHEMA = pa.schema(
    [
        pa.field(KEY, pa.string()),
        pa.field("account_id", pa.string()),
        pa.field("amount", pa.decimal128(AMOUNT_TYPE.precision, AMOUNT_TYPE.scale)),
        pa.field("currency", pa.string()),
        pa.field("created_at", pa.timestamp("us", tz="UTC")),
        pa.field(DIGEST, pa.binary()),
        pa.field("payment_date", pa.date32()),
        pa.field("source_file", pa.string()),
        pa.field("source_line", pa.int32()),
        pa.field("dagster_run_id", pa.string()),
        pa.field("ingested_at", pa.timestamp("us", tz="UTC")),
    ]
)


class PaymentsSettings(dg.ConfigurableResource):
    """How replays of `payments` are judged (resource `payments_settings`)."""

    mutable_columns: list[str] = []
    """Payload columns a replay may change without a conflict (the stored value stays):
    any of account_id, amount, currency, created_at."""

    def compared_columns(self) -> list[str]:
        unknown = sorted(set(self.mutable_columns) - set(PAYLOAD_COLUMNS))
        if unknown:
            raise ValueError(
                f"mutable_columns {unknown} are not payment columns; choose from "
                f"{list(PAYLOAD_COLUMNS)} (the idempotency key itself never changes)"
            )
        return [name for name in PAYLOAD_COLUMNS if name not in self.mutable_columns]


@dataclass(frozen=True)
class Conflict:
    key: str
    column: str
    stored: str | None
    incoming: str | None
    stored_at: str
    incoming_at: str

    def __str__(self) -> str:
        return (
            f"{self.column}: stored {self.stored!r} ({self.stored_at}), "
            f"incoming {self.incoming!r} ({self.incoming_at})"
        )


class IdempotencyConflictError(Exception):
    """Keys replayed with a different payload; nothing of the batch was committed."""

    def __init__(self, day: str, conflicts: Sequence[Conflict], keys: int) -> None:
        self.conflicts = list(conflicts)
        self.keys = keys
        by_key: dict[str, list[Conflict]] = {}
        for conflict in self.conflicts:
            by_key.setdefault(conflict.key, []).append(conflict)
        lines = [
            f"  {key!r}:\n" + "\n".join(f"    {c}" for c in found) for key, found in by_key.items()
        ]
        more = keys - len(by_key)
        tail = f"\n  ... and {more} more keys (all in {PAYMENT_CONFLICTS})" if more > 0 else ""
        used = "key was" if keys == 1 else "keys were"
        super().__init__(
            f"payments of {day}: {keys} idempotency {used} already used for a different "
            "payment; nothing of this batch was committed:\n" + "\n".join(lines) + tail
        )


@dataclass(frozen=True)
class CheckedBatch:
    """A batch judged against the table: its new payments, its replays (also per day),
    its conflicts."""

    new: DataFrame
    new_rows: int
    replayed: int
    conflicts: DataFrame
    conflict_keys: int
    replayed_by_day: dict[dt.date, int]


def _where(alias: str) -> Column:
    return F.concat(
        F.col(f"{alias}.source_file"), F.lit(":"), F.col(f"{alias}.source_line").cast("string")
    )


def _differences(stored: DataFrame, incoming: DataFrame, compared: Sequence[str]) -> DataFrame:
    """One row per (key, column) where `incoming` says something else than `stored`
    (both keyed by KEY; typed comparison, nulls equal to nulls)."""
    s, i = stored.alias("s"), incoming.alias("i")
    columns = [
        F.when(
            ~F.col(f"s.{name}").eqNullSafe(F.col(f"i.{name}")),
            F.struct(
                F.lit(name).alias("column"),
                shown(name, "s").alias("stored_value"),
                shown(name, "i").alias("incoming_value"),
            ),
        )
        for name in compared
    ]
    return (
        s.join(i, F.col(f"s.{KEY}") == F.col(f"i.{KEY}"))
        .select(
            F.col(f"i.{KEY}").alias(KEY),
            _where("s").alias("stored_at"),
            _where("i").alias("incoming_at"),
            F.explode(F.array_compact(F.array(*columns))).alias("difference"),
        )
        .select(KEY, "difference.*", "stored_at", "incoming_at")
    )


def check_batch(
    lakehouse: Lakehouse, batch: DataFrame, compared: Sequence[str], version: int
) -> CheckedBatch:
    """Judge `batch` (parsed payments, copies included) against the table at `version`.

    The lookup reads the stored key and digest of the batch's keys only, in one scan;
    whole stored rows are read for the keys whose digest differs, which only a conflict
    (or a change to a mutable column) produces. A batch without either costs that scan
    and one small job.
    """
    copies = Window.partitionBy(KEY).orderBy("source_file", "source_line")
    numbered = batch.withColumns(
        {"copy": F.row_number().over(copies), "first": F.first(DIGEST).over(copies)}
    )
    stored_digests = (
        lakehouse.read(PAYMENTS, version=version, columns=[KEY, DIGEST])
        .join(F.broadcast(batch.select(KEY)), KEY, "left_semi")
        .withColumnRenamed(DIGEST, "stored")
    )
    first_copy = F.col("copy") == 1
    judged = (
        numbered.join(stored_digests, KEY, "left")
        .withColumn(
            "state",
            # A key's first copy in the batch is judged against the stored payment, its
            # later copies against that first copy.
            F.when(first_copy & F.col("stored").isNull(), "new")
            .when(first_copy & (F.col("stored") == F.col(DIGEST)), "replayed")
            .when(first_copy, "suspect")
            .when(F.col("first") == F.col(DIGEST), "replayed")
            .otherwise("differing copy"),
        )
        .drop("stored", "first")
        .localCheckpoint()
    )
    states: dict[str, int] = {}
    replayed_by_day: dict[dt.date, int] = {}
    for day, state, count in judged.groupBy("payment_date", "state").count().collect():
        states[state] = states.get(state, 0) + count
        if state != "new":
            replayed_by_day[day] = replayed_by_day.get(day, 0) + count
    conflicts = _no_conflicts(batch)
    if states.get("differing copy"):
        conflicts = _differences(
            judged.where(first_copy), judged.where(F.col("state") == "differing copy"), compared
        )
    if states.get("suspect"):
        suspects = judged.where(F.col("state") == "suspect")
        stored_rows = lakehouse.read(
            PAYMENTS, version=version, columns=[KEY, *compared, "source_file", "source_line"]
        ).join(F.broadcast(suspects.select(KEY)), KEY, "left_semi")
        conflicts = conflicts.unionByName(_differences(stored_rows, suspects, compared))
    conflict_keys = 0
    if states.get("differing copy") or states.get("suspect"):
        conflicts = conflicts.localCheckpoint()
        conflict_keys = conflicts.select(KEY).distinct().count()
    new = judged.where(F.col("state") == "new").drop("copy", "state")
    new_rows = states.get("new", 0)
    # Without conflicts, a suspect or differing copy differs in mutable columns only.
    replayed = sum(states.values()) - new_rows
    return CheckedBatch(new, new_rows, replayed, conflicts, conflict_keys, replayed_by_day)


def _no_conflicts(batch: DataFrame) -> DataFrame:
    return batch.sparkSession.createDataFrame(
        [],
        f"{KEY} string, column string, stored_value string, incoming_value string, "
        "stored_at string, incoming_at string",
    )


def _record_conflicts(
    context: dg.AssetExecutionContext,
    lakehouse: Lakehouse,
    days: tuple[dt.date, dt.date],
    checked: CheckedBatch,
) -> None:
    """Keep the current conflicts of the days `first..last` in `payments_conflicts`
    (none once they ingest). A batch with conflicts is one day's."""
    first, last = days
    rows = checked.conflicts.select(
        F.lit(first).alias("payment_date"),
        "*",
        F.lit(context.run.run_id).alias("dagster_run_id"),
        F.lit(dt.datetime.now(dt.UTC)).alias("detected_at"),
    )
    where = between("payment_date", first, last)
    if (
        checked.conflict_keys
        or not lakehouse.exists(PAYMENT_CONFLICTS)
        or lakehouse.count(PAYMENT_CONFLICTS, where=where)
    ):
        lakehouse.overwrite(
            PAYMENT_CONFLICTS,
            rows,
            where=where,
            metadata=commit_metadata(
                context, partition_key=str(first) if first == last else f"{first}..{last}"
            ),
        )


def _first_conflicts(checked: CheckedBatch) -> list[Conflict]:
    """The conflicts an error message names, in key and column order."""
    first = checked.conflicts.orderBy(KEY, "column").limit(MAX_NAMED_CONFLICTS)
    return [
        Conflict(r[KEY], r.column, r.stored_value, r.incoming_value, r.stored_at, r.incoming_at)
        for r in first.collect()
    ]


def _stored_rows(new: DataFrame, run_id: str) -> DataFrame:
    """New payments as the table keeps them, with where and when they were ingested."""
    return new.select(
        KEY,
        *PAYLOAD_COLUMNS,
        DIGEST,
        "payment_date",
        "source_file",
        "source_line",
        F.lit(run_id).alias("dagster_run_id"),
        F.lit(dt.datetime.now(dt.UTC)).alias("ingested_at"),
    )


def _conflict_check(
    span: str, conflicts: Sequence[Conflict], keys: int, *, days: Sequence[str] = ()
) -> dg.AssetCheckResult:
    """The check's evaluation for the run's partitions `span`: its conflicting keys (and,
    for a range, the days that hold them)."""
    metadata: dict[str, Any] = {
        "partition": span,
        "conflicting_keys": dg.MetadataValue.int(keys),
        "conflicts": dg.MetadataValue.md(
            "\n".join(f"- `{c.key}` {c}" for c in conflicts) or "none"
        ),
        "control_table": PAYMENT_CONFLICTS,
    }
    if days:
        metadata["conflicting_days"] = dg.MetadataValue.json(list(days))
    return dg.AssetCheckResult(
        check_name=NO_CONFLICTS,
        passed=keys == 0,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata=metadata,
    )


@dataclass(frozen=True)
class _Ingest:
    """What every day of a run needs."""

    context: dg.AssetExecutionContext
    spark: SparkResource
    lakehouse: Lakehouse
    landing: LandingZone
    compared: list[str]

    def files(self, days: Sequence[dt.date]) -> dict[dt.date, list[FileStat]]:
        """Each day's files, the day folders listed together (on an object store one
        request per 1,000 files of a range, not one per day). The layout is
        payments/date=YYYY-MM-DD/<file>: a file in a deeper folder is no input."""
        listed = self.landing.list_folders([day_folder(day) for day in days], suffix=".jsonl")
        return {day: listed[day_folder(day)] for day in days}

    def create_table(self, metadata: dict[str, Any]) -> None:
        # Created empty first, so that every insert is a commit on an existing table that
        # Delta checks against the writer's app transaction (two runs creating the table
        # at once would both pass: a create has no snapshot to conflict with).
        self.lakehouse.create(
            PAYMENTS, PAYMENTS_SCHEMA, metadata=metadata, partition_by=["payment_date"]
        )

    def day_metadata(
        self,
        day: dt.date,
        result: CommitResult | None,
        sources: Sequence[Fingerprint],
        facts: dict[str, int],
    ) -> dict[str, Any]:
        if result is None:
            return skipped_metadata(
                self.lakehouse,
                PAYMENTS,
                reason="nothing new: every payment was already stored",
                partition_key=day.isoformat(),
                sources=sources,
                extra=facts,
            )
        return materialization_metadata(
            self.lakehouse, result, partition_key=day.isoformat(), sources=sources, extra=facts
        )

    def day(self, day: dt.date) -> dict[str, Any]:
        """Ingest one day on its own, as a run of that day alone: the day's metadata, or
        IdempotencyConflictError (its conflicts recorded, nothing of the day committed)."""
        context, lakehouse = self.context, self.lakehouse
        parsed = parse_payments(self.spark.session(), self.landing, self.files([day])[day])
        metadata = commit_metadata(context, partition_key=day.isoformat(), sources=parsed.sources)
        self.create_table(metadata)
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            writer = lakehouse.app_transaction_version(PAYMENTS, WRITER_APP_ID)
            version = lakehouse.version(PAYMENTS) or 0  # created above
            checked = check_batch(lakehouse, parsed.frame, self.compared, version)
            if checked.conflict_keys:
                _record_conflicts(context, lakehouse, (day, day), checked)
                raise IdempotencyConflictError(
                    day.isoformat(), _first_conflicts(checked), checked.conflict_keys
                )
            if checked.new_rows == 0:
                result = None
                break
            try:
                result = lakehouse.append(
                    PAYMENTS,
                    _stored_rows(checked.new, context.run.run_id),
                    metadata=metadata,
                    app_transaction=AppTransaction(WRITER_APP_ID, (writer or 0) + 1),
                )
                break
            except StaleWriteError:
                if attempt == WRITE_ATTEMPTS:
                    raise
                context.log.info("another payments run committed meanwhile: checking again")
        _record_conflicts(context, lakehouse, (day, day), checked)
        facts = {"lines_read": parsed.lines_read, "replayed": checked.replayed}
        return self.day_metadata(day, result, parsed.sources, facts)


class _OnePass:
    """A range's days read and judged in one Spark pass, then committed one by one, each
    as its own append (app transaction, Delta version, metadata): a day costs a commit,
    not a Spark job. Payments judged together are judged as the days one after the other
    would judge them (a key's first copy, oldest day first, against the table; later
    copies against it), up to the first day with a conflict: a conflict is the day of its
    incoming copy, so the days before it are judged as runs of each would judge them. The
    days from that one on are not this pass's (`covers`)."""

    def __init__(self, ingest: _Ingest, days: Sequence[dt.date]) -> None:
        self.ingest = ingest
        context, lakehouse = ingest.context, ingest.lakehouse
        self.files = ingest.files(days)
        parsed = parse_payments(
            ingest.spark.session(),
            ingest.landing,
            [stat for files in self.files.values() for stat in files],
        )
        self.parsed = parsed
        ingest.create_table(
            commit_metadata(context, partition_key=run_span([day.isoformat() for day in days]))
        )
        self.writer = lakehouse.app_transaction_version(PAYMENTS, WRITER_APP_ID) or 0
        version = lakehouse.version(PAYMENTS) or 0  # created above
        self.checked = check_batch(lakehouse, parsed.frame, ingest.compared, version)
        self.first_conflict: dt.date | None = None
        judged = list(days)
        if self.checked.conflict_keys:
            self.first_conflict = self.checked.conflicts.agg(
                F.min(folder_day(F.col("incoming_at")))
            ).collect()[0][0]
            judged = [day for day in days if day < self.first_conflict]
        if judged:
            # The days this pass commits have no conflict now: none is kept for them. Only
            # their new rows are staged: the next pass judges the later days again.
            clean = replace(self.checked, conflicts=_no_conflicts(parsed.frame), conflict_keys=0)
            _record_conflicts(context, lakehouse, (judged[0], judged[-1]), clean)
            new = self.checked.new.where(F.col("payment_date") <= judged[-1])
            self.parts = lakehouse.staged_parts(
                _stored_rows(new, context.run.run_id), "payment_date"
            )

    def covers(self, day: dt.date) -> bool:
        """Whether this pass judged `day` as a run of it alone would."""
        return self.first_conflict is None or day < self.first_conflict

    def day(self, day: dt.date) -> dict[str, Any]:
        """Commit the day's new payments (raises StaleWriteError when another payments
        run committed since the range was judged)."""
        paths = {stat.path for stat in self.files[day]}
        sources = [f for f in self.parsed.sources if f.path in paths]
        facts = {
            "lines_read": sum(self.parsed.lines_by_file.get(path, 0) for path in paths),
            "replayed": self.checked.replayed_by_day.get(day, 0),
        }
        rows, count = self.parts.part(day)
        result = None
        if count:
            result = self.ingest.lakehouse.append(
                PAYMENTS,
                rows,
                metadata=commit_metadata(
                    self.ingest.context, partition_key=day.isoformat(), sources=sources
                ),
                app_transaction=AppTransaction(WRITER_APP_ID, self.writer + 1),
            )
            self.writer += 1
        return self.ingest.day_metadata(day, result, sources, facts)


class _Passes:
    """The one-pass judgements of a range, oldest day first: the first pass covers every
    day up to the first with a conflict; that day is then judged on its own (it fails as
    a run of it would), and the next pass covers the days after it. Days with bad lines
    go into `bad` as a pass finds them, all at once. A range thus costs a pass per
    conflicting day, not a read per day."""

    def __init__(self, ingest: _Ingest, days: Sequence[dt.date]) -> None:
        self.ingest = ingest
        self.days = list(days)
        self.bad: dict[dt.date, SourceDataError] = {}
        self.current: _OnePass | None = None
        self.stopped = False

    def stop(self) -> None:
        """Judge every day from now on on its own."""
        self.stopped = True

    def covering(self, day: dt.date) -> _OnePass | None:
        """The pass that judged `day` as a run of it alone would, made now if `day` is
        past the current pass's first conflict; None when `day` is to be judged on its own
        (or is bad: see `bad`)."""
        if self.stopped:
            return None
        if self.current is None or (
            self.current.first_conflict is not None and day > self.current.first_conflict
        ):
            self.current = self._pass([later for later in self.days if later >= day])
            if self.current is None:
                self.stop()
                return None
            if self.current.first_conflict is not None:
                self.ingest.context.log.info(
                    f"a conflict in {self.current.first_conflict}: the days before it commit "
                    "from this pass, that day is judged on its own, and the days after it in "
                    "one pass more"
                )
        return self.current if self.current.covers(day) else None

    def _pass(self, days: Sequence[dt.date]) -> _OnePass | None:
        """`days` in one pass, less the days whose lines are bad (into `bad`, each with
        its own error, all named by the pass that found them; another pass reads the
        others). None when no day is left, or when the input's problem is not a day's
        lines (an empty file): then each day is read on its own."""
        context = self.ingest.context
        while remaining := [day for day in days if day not in self.bad]:
            try:
                return _OnePass(self.ingest, remaining)
            except SourceDataError as error:
                found = error.of(remaining) if isinstance(error, SourceDataErrors) else None
                if not found:
                    context.log.info(
                        f"bad input in the range, so each day is read on its own: {error}"
                    )
                    return None
                self.bad.update(found)
                context.log.info(
                    f"bad lines in {len(found)} day(s) of the range "
                    f"({', '.join(map(str, found))}): they fail, the other days are read in "
                    "one pass"
                )
        return None


def _ingest_range(
    ingest: _Ingest, keys: Sequence[str], refused: dict[str, IdempotencyConflictError]
) -> None:
    """Materialize the range `keys` in as few passes as its conflicts allow (`_Passes`),
    each day exactly as a run of it alone would; once another payments run commits in
    between, each remaining day on its own. The days refused for conflicts go into
    `refused`; dg.Failure names every day that failed."""
    context = ingest.context
    passes = _Passes(ingest, [parse_day(key) for key in keys])

    def materialize(key: str) -> Mapping[str, Any]:
        day = parse_day(key)
        one_pass = passes.covering(day)
        if day in passes.bad:
            raise passes.bad[day]
        if one_pass is not None:
            try:
                return one_pass.day(day)
            except StaleWriteError:
                context.log.info(
                    f"another payments run committed during the range: {key} and the days "
                    "after it are checked again, one by one"
                )
                passes.stop()
        try:
            return ingest.day(day)
        except IdempotencyConflictError as error:
            refused[key] = error
            raise

    materialize_partitions(context, materialize, on_failure="continue")


@dg.asset(
    partitions_def=daily_payments,
    backfill_policy=SINGLE_RUN,
    group_name="database",
    kinds={"spark", "delta"},
    check_specs=[
        # Blocking: a day that fails it is not committed, and nothing downstream may
        # read the run's days as published.
        dg.AssetCheckSpec(
            NO_CONFLICTS,
            asset=PAYMENTS,
            blocking=True,
            description="No idempotency key of the run's days was replayed with a different "
            "payment.",
        )
    ],
    **declared(
        "idempotent-insert",
        restore=RESTORE_WHOLE_TABLE,
        reads=["payments"],
        writes=["payments_conflicts"],
    ),
)
def payments(
    context: dg.AssetExecutionContext,
    spark: SparkResource,
    lakehouse: Lakehouse,
    landing: LandingZone,
    payments_settings: PaymentsSettings,
) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
    """Payments inserted once per `idempotency_key` from
    `payments/date=YYYY-MM-DD/*.jsonl`. A replayed key must repeat its payment (typed:
    "12.5" equals "12.50"); a different one fails the day, names every conflict and
    commits nothing of the day. A backfilled range is one run: one Spark pass over its
    files, then one commit per day."""
    ingest = _Ingest(context, spark, lakehouse, landing, payments_settings.compared_columns())
    keys = context.partition_keys
    if len(keys) == 1:
        try:
            metadata = ingest.day(parse_day(keys[0]))
        except IdempotencyConflictError as error:
            yield _conflict_check(keys[0], error.conflicts, error.keys)
            raise
        yield dg.MaterializeResult(
            metadata=metadata, check_results=[_conflict_check(keys[0], [], 0)]
        )
        return
    refused: dict[str, IdempotencyConflictError] = {}
    try:
        _ingest_range(ingest, keys, refused)
    except dg.Failure:
        yield _conflict_check(
            run_span(keys),
            [c for found in refused.values() for c in found.conflicts][:MAX_NAMED_CONFLICTS],
            sum(found.keys for found in refused.values()),
            days=list(refused),
        )
        raise
    yield dg.MaterializeResult(check_results=[_conflict_check(run_span(keys), [], 0)])


payments_job = dg.define_asset_job(
    "payments_job",
    selection=[payments],
    description="Insert days of payments once per idempotency key (a replay must match).",
)
