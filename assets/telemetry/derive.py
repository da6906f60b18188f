"""Bringing the running totals and `telemetry_hourly` of one subject up to the raw table:
only the dirty hours are recomputed (read here in windows of bounded size, or on Spark's
executors when telemetry computes there: `on_spark`), and each write
records (as its Delta app transaction) the raw version it reflects, atomically with the
rows. Each derived table reconciles from the version it reflects itself, so a run that
failed between two writes is finished by the next from where each table stands."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from assets.telemetry import control
from assets.telemetry.reconcile import (
    HourRange,
    Window,
    by_hour,
    carry_of,
    dirty_frontier,
    hour_starts,
    hours_within,
    merge_sums,
    pending_spans,
    plan_windows,
    touched_hour_ranges,
)
from assets.telemetry.subjects import app_id
from resources import Lakehouse
from resources.lakehouse import AppTransaction, CommitResult, Stream, spooled
from resources.lakehouse.predicates import (
    Predicate,
    all_of,
    any_of,
    eq,
    half_open,
    within,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

Regime = Literal["up_to_date", "first", "append", "late", "from_zero"]
# Raw rows held in memory at once while recomputing (a few hundred bytes each, with
# their sorted copy and derived columns): a subject's history of any length, and an
# hour of any size, is read this many rows at a time.
WINDOW_ROWS = 1_000_000
Metadata = Callable[..., dict[str, Any]]


@dataclass(frozen=True)
class Reconciled:
    regime: Regime
    raw_version: int | None
    rows_recomputed: int = 0
    rows_replaced: int = 0
    frontier: dt.datetime | None = None
    hours_recomputed: int = 0
    commit: CommitResult | None = None
    note: str = ""
    written: pa.Table | None = None
    """The hours this run recomputed (their sums), for the hourly chart."""
    hour_starts_rewritten: int = 0
    rows_commit: CommitResult | None = None
    """The running totals' commit of in-hour rows (`commit` is then that of hour starts)."""

    def progress(self) -> dict[str, object]:
        """What a progress line says of it."""
        return {
            "regime": self.regime,
            "rows_recomputed": self.rows_recomputed,
            "rows_replaced": self.rows_replaced,
            "delta_version": self.commit.version if self.commit else "none (nothing to do)",
        }


@dataclass(frozen=True)
class Pending:
    """What one derived table of one subject has still to take in."""

    raw_version: int
    ranges: list[HourRange] | None
    """The dirty hours; None: the subject's whole history (first run, or from zero)."""
    frontier: dt.datetime | None
    lost: str
    """Why the whole history is recomputed although the table holds rows ("": it is not)."""

    @property
    def where(self) -> Predicate | None:
        """The rows of the table's subject this recomputation replaces (hour column)."""
        if self.ranges is None:
            return None
        return any_of(half_open("hour", a, b) for a, b in self.ranges)


def _pending(
    lakehouse: Lakehouse, tables: Sequence[str], subject: str, log: Callable[[str], None]
) -> list[Pending | None]:
    """What each of `tables` has still to take in for `subject` (None: nothing), from one
    read of the dirty spans."""
    raw_version = lakehouse.version(control.RAW)
    reflected = [lakehouse.app_transaction_version(t, app_id(subject)) for t in tables]
    oldest = control.lowest_version(reflected)
    every_span = control.dirty_spans(lakehouse, subject, oldest)
    pending: list[Pending | None] = []
    for table, version in zip(tables, reflected, strict=True):
        spans = pending_spans(every_span, version)
        if raw_version is None or not spans:
            pending.append(None)
            continue
        lost = _lost_history(lakehouse, table, subject, version)
        if lost:
            log(lost)
        whole = bool(lost) or version is None
        pending.append(
            Pending(
                raw_version,
                None if whole else touched_hour_ranges(spans),
                None if whole else dirty_frontier(spans),
                lost,
            )
        )
    return pending


def _lost_history(lakehouse: Lakehouse, table: str, subject: str, reflected: int | None) -> str:
    """Why the subject must be recomputed from zero ("" when it need not): the table holds
    rows of the subject but no record of the raw version they reflect (restored, or
    rebuilt by hand), so no frontier can be trusted."""
    if reflected is not None:
        return ""
    if lakehouse.count(table, where=eq("subject_key", subject)) == 0:
        return ""
    return (
        f"{table} holds rows of subject {subject!r} but no record of the raw version they "
        "reflect; recomputing the subject from zero"
    )


def _scan(
    lakehouse: Lakehouse, subject: str, pending: Pending
) -> Iterator[tuple[pa.Table, pa.Table]]:
    """(within, sums) of the pending hours' raw rows (`by_hour`), one window at a time."""
    windows: Sequence[Window] = plan_windows(
        control.rows_by_hour(lakehouse, subject, pending.ranges), pending.ranges, WINDOW_ROWS
    )
    carry = None
    for start, end in windows:
        rows = lakehouse.read_arrow(
            control.RAW,
            version=pending.raw_version,
            where=all_of((eq("subject_key", subject), within("ts", start, end))),
        )
        if rows.num_rows:
            rows_within, sums = by_hour(rows, carry)
            del rows  # one window's rows held at a time
            carry = carry_of(rows_within) or carry
            yield rows_within, sums
            del rows_within


def _replace(
    lakehouse: Lakehouse,
    table: str,
    rows: pa.Table | Stream | DataFrame,
    subject: str,
    pending: Pending,
    metadata: Metadata,
    *,
    hours: Predicate | None = None,
) -> CommitResult:
    """Replace the subject's rows of `table` in the pending hours (or in `hours`) by `rows`,
    recording the raw version they reflect, in one commit."""
    selected = pending.where if hours is None else hours
    return lakehouse.overwrite(
        table,
        rows,
        where=all_of((eq("subject_key", subject), selected)),
        metadata=metadata(subject_key=subject, raw_version=pending.raw_version),
        app_transaction=AppTransaction(app_id(subject), pending.raw_version),
    )


def _regime(pending: Pending, later_rows: bool) -> Regime:
    if pending.lost:
        return "from_zero"
    if pending.ranges is None:
        return "first"
    return "late" if later_rows else "append"


def _sums(
    lakehouse: Lakehouse, subject: str, pending: Pending, spark: Lakehouse | None
) -> pa.Table:
    """The pending hours' sums, summed from their raw rows (on Spark, or window by window)."""
    if spark is not None:
        from assets.telemetry import on_spark

        return on_spark.hour_sums(on_spark.pending_raw(spark, subject, pending))
    parts = [sums for _, sums in _scan(lakehouse, subject, pending)]
    return merge_sums(parts, control.HOURLY_SCHEMA)


def _recompute_rows(
    lakehouse: Lakehouse,
    subject: str,
    pending: Pending,
    metadata: Metadata,
    spark: Lakehouse | None,
    sums: list[pa.Table] | None,
) -> CommitResult:
    """Replace the pending hours' in-hour rows in one commit, appending the hours' sums to
    `sums` on the way (unless None): computed by Spark's executors, which write them, or
    here, window by window, spooled to local disk and streamed into the commit."""
    if spark is not None:
        from assets.telemetry import on_spark

        raw = on_spark.pending_raw(spark, subject, pending)
        if sums is not None:
            sums.append(on_spark.hour_sums(raw))
        estimate = control.rows_by_hour(lakehouse, subject, pending.ranges)
        within = on_spark.within_hour(raw, sum(estimate.values()))
        return _replace(spark, control.WITHIN_HOUR, within, subject, pending, metadata)

    def batches() -> Iterator[pa.RecordBatch]:
        for rows, hour_sums in _scan(lakehouse, subject, pending):
            if sums is not None:
                sums.append(hour_sums)
            yield from rows.cast(control.WITHIN_HOUR_SCHEMA).to_batches()
            del rows

    with spooled(control.WITHIN_HOUR_SCHEMA, batches()) as rows:
        return _replace(lakehouse, control.WITHIN_HOUR, rows, subject, pending, metadata)


def reconcile_totals(
    lakehouse: Lakehouse,
    subject: str,
    metadata: Metadata,
    log: Callable[[str], None],
    spark: Lakehouse | None = None,
) -> Reconciled:
    """The running totals of `subject`: the in-hour sums of the dirty hours' rows are
    recomputed (in one commit), then the hour starts from the first dirty hour on (one
    row per hour). `spark`: the lakehouse through delta-spark when the rows are computed
    on Spark (TelemetrySettings.compute)."""
    for table in (control.WITHIN_HOUR, control.HOUR_START):
        control.ensure_table(lakehouse, table, metadata())
    rows_pending, starts_pending = _pending(
        lakehouse, (control.WITHIN_HOUR, control.HOUR_START), subject, log
    )
    if rows_pending is None and starts_pending is None:
        reflected = lakehouse.app_transaction_version(control.HOUR_START, app_id(subject))
        return Reconciled("up_to_date", reflected)
    sums: list[pa.Table] = []
    recomputed, replaced, commit, rows_commit = 0, 0, None, None
    if rows_pending is not None:
        # The hour sums come with the rows when both tables lag the same way (always,
        # unless a run failed between the two writes).
        share = starts_pending is not None and starts_pending.ranges == rows_pending.ranges
        commit = rows_commit = _recompute_rows(
            lakehouse, subject, rows_pending, metadata, spark, sums if share else None
        )
        recomputed = commit.metrics["rows_inserted"]
        replaced = commit.metrics["rows_deleted"]
    pending = starts_pending or rows_pending
    assert pending is not None
    merged = merge_sums(sums, control.HOURLY_SCHEMA)
    later = rewritten = 0
    if starts_pending is not None:
        if not sums:
            merged = _sums(lakehouse, subject, starts_pending, spark)
        commit, rewritten, later = _rebase(lakehouse, subject, starts_pending, merged, metadata)
    return Reconciled(
        _regime(pending, later > 0 or replaced > 0),
        pending.raw_version,
        recomputed,
        replaced,
        pending.frontier,
        merged.num_rows,
        commit,
        pending.lost,
        hour_starts_rewritten=rewritten,
        rows_commit=rows_commit,
    )


def _rebase(
    lakehouse: Lakehouse,
    subject: str,
    pending: Pending,
    fresh: pa.Table,
    metadata: Metadata,
) -> tuple[CommitResult, int, int]:
    """Rewrite the subject's hour starts from its first dirty hour on, the dirty hours'
    sums taken from `fresh` and every other hour's from the table. Returns the commit, the
    rows it wrote, and how many of them lie after the dirty hours."""
    subject_rows = eq("subject_key", subject)
    first = last = None
    stored = control.HOURLY_SCHEMA.empty_table()
    if pending.ranges is not None:
        first, last = pending.ranges[0][0], pending.ranges[-1][1]
        stored = lakehouse.read_arrow(
            control.HOUR_START, where=subject_rows, columns=control.HOURLY_SCHEMA.names
        ).cast(control.HOURLY_SCHEMA)
        stored = stored.filter(pc.invert(_hours_in(stored["hour"], pending.ranges)))
    every = hour_starts(pa.concat_tables([stored, fresh]), control.HOUR_START_SCHEMA)
    written = every if first is None else every.filter(_at_or_after(every["hour"], first))
    later = 0 if last is None else written.filter(_at_or_after(written["hour"], last)).num_rows
    commit = _replace(
        lakehouse,
        control.HOUR_START,
        written,
        subject,
        pending,
        metadata,
        hours=within("hour", first, None),
    )
    return commit, written.num_rows, later


def _at_or_after(hours: pa.ChunkedArray, bound: dt.datetime) -> pa.ChunkedArray:
    return pc.greater_equal(hours, pa.scalar(bound, control.UTC_TS))


def _hours_in(hours: pa.ChunkedArray, ranges: Sequence[HourRange]) -> pa.ChunkedArray:
    masks = [pc.and_(_at_or_after(hours, a), pc.invert(_at_or_after(hours, b))) for a, b in ranges]
    return functools.reduce(pc.or_, masks)


def _hour_sums(
    lakehouse: Lakehouse, subject: str, pending: Pending, spark: Lakehouse | None
) -> pa.Table:
    """The pending hours' sums: read from the hour starts when they reflect the same raw
    version (the running totals ran first in the run, as the job orders them: one row
    per hour instead of every raw row), else summed from the raw rows."""
    hour_starts_version = lakehouse.app_transaction_version(control.HOUR_START, app_id(subject))
    if hour_starts_version != pending.raw_version:
        return _sums(lakehouse, subject, pending, spark)
    where = all_of((eq("subject_key", subject), pending.where))
    stored = lakehouse.read_arrow(
        control.HOUR_START, where=where, columns=control.HOURLY_SCHEMA.names
    )
    return stored.cast(control.HOURLY_SCHEMA).sort_by([("hour", "ascending")])


def reconcile_hourly(
    lakehouse: Lakehouse,
    subject: str,
    metadata: Metadata,
    log: Callable[[str], None],
    spark: Lakehouse | None = None,
) -> Reconciled:
    control.ensure_table(lakehouse, control.HOURLY, metadata())
    (pending,) = _pending(lakehouse, (control.HOURLY,), subject, log)
    if pending is None:
        reflected = lakehouse.app_transaction_version(control.HOURLY, app_id(subject))
        return Reconciled("up_to_date", reflected)
    hourly = _hour_sums(lakehouse, subject, pending, spark)
    commit = _replace(lakehouse, control.HOURLY, hourly, subject, pending, metadata)
    regime: Regime = (
        "from_zero" if pending.lost else ("first" if pending.ranges is None else "late")
    )
    hours = hourly.num_rows if pending.ranges is None else hours_within(pending.ranges)
    rows = pc.sum(hourly["rows"]).as_py() or 0
    return Reconciled(
        regime, pending.raw_version, rows, 0, None, hours, commit, pending.lost, hourly
    )
