"""Bringing `telemetry_running_totals` and `telemetry_hourly` of one subject up to the raw
table: only the dirty part is recomputed, and each write records (as its Delta app
transaction) the raw version it reflects, atomically with the rows."""

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa

from assets.telemetry import control
from assets.telemetry.reconcile import (
    ZERO,
    DirtySpan,
    Seed,
    dirty_frontier,
    hourly_rollup,
    hours_within,
    last_totals,
    running_totals,
    touched_hour_ranges,
)
from assets.telemetry.subjects import app_id
from resources import Lakehouse
from resources.lakehouse import AppTransaction, CommitResult
from resources.lakehouse.predicates import Compare, Predicate, any_of, eq, half_open

Regime = Literal["up_to_date", "first", "append", "late", "from_zero"]
# Windows, growing, in which the last totals row before a frontier is looked for: the
# totals table's files cover disjoint time ranges of a subject, so a narrow window reads
# one or two files instead of the subject's whole history.
SEED_LOOKBACK = (dt.timedelta(hours=1), dt.timedelta(days=1), dt.timedelta(days=31), None)


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
    """The rows this run wrote (hourly: the recomputed hours)."""

    def progress(self) -> dict[str, object]:
        """What a progress line says of it."""
        return {
            "regime": self.regime,
            "rows_recomputed": self.rows_recomputed,
            "rows_replaced": self.rows_replaced,
            "delta_version": self.commit.version if self.commit else "none (nothing to do)",
        }


def _dirty(
    lakehouse: Lakehouse, table: str, subject: str
) -> tuple[int | None, int | None, list[DirtySpan]]:
    """(raw version now, raw version `table` reflects for the subject, spans since)."""
    raw_version = lakehouse.version(control.RAW)
    reflected = lakehouse.app_transaction_version(table, app_id(subject))
    return raw_version, reflected, control.dirty_spans(lakehouse, subject, reflected)


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


def _seed_before(lakehouse: Lakehouse, subject: str, frontier: dt.datetime) -> Seed:
    for lookback in SEED_LOOKBACK:
        where: Predicate = eq("subject_key", subject) & Compare("ts", "<", frontier)
        if lookback is not None:
            where = where & Compare("ts", ">=", frontier - lookback)
        seed = last_totals(lakehouse.read_arrow(control.TOTALS, where=where))
        if seed is not None:
            return seed
    return ZERO


def reconcile_totals(
    lakehouse: Lakehouse,
    subject: str,
    metadata: Callable[..., dict[str, Any]],
    log: Callable[[str], None],
) -> Reconciled:
    control.ensure_table(lakehouse, control.TOTALS, metadata())
    raw_version, reflected, spans = _dirty(lakehouse, control.TOTALS, subject)
    if raw_version is None or not spans:
        return Reconciled("up_to_date", reflected)
    lost = _lost_history(lakehouse, control.TOTALS, subject, reflected)
    if lost:
        log(lost)
    where: Predicate = eq("subject_key", subject)
    frontier = None if lost or reflected is None else dirty_frontier(spans)
    seed = ZERO
    if frontier is not None:
        where = where & Compare("ts", ">=", frontier)
        seed = _seed_before(lakehouse, subject, frontier)
    replaced = lakehouse.count(control.TOTALS, where=where)
    rows = lakehouse.read_arrow(control.RAW, version=raw_version, where=where)
    totals = running_totals(rows, seed, control.TOTALS_SCHEMA)
    commit = lakehouse.overwrite(
        control.TOTALS,
        totals,
        where=where,
        metadata=metadata(
            subject_key=subject,
            raw_version=raw_version,
            frontier=frontier.isoformat() if frontier else None,
        ),
        app_transaction=AppTransaction(app_id(subject), raw_version),
    )
    if lost:
        regime: Regime = "from_zero"
    elif frontier is None:
        regime = "first"
    else:
        regime = "late" if replaced else "append"
    return Reconciled(
        regime, raw_version, totals.num_rows, replaced, frontier, commit=commit, note=lost
    )


def reconcile_hourly(
    lakehouse: Lakehouse,
    subject: str,
    metadata: Callable[..., dict[str, Any]],
    log: Callable[[str], None],
) -> Reconciled:
    control.ensure_table(lakehouse, control.HOURLY, metadata())
    raw_version, reflected, spans = _dirty(lakehouse, control.HOURLY, subject)
    if raw_version is None or not spans:
        return Reconciled("up_to_date", reflected)
    lost = _lost_history(lakehouse, control.HOURLY, subject, reflected)
    if lost:
        log(lost)
    subject_rows = eq("subject_key", subject)
    if lost or reflected is None:
        ranges = None
        rows = lakehouse.read_arrow(control.RAW, version=raw_version, where=subject_rows)
        where = subject_rows
    else:
        ranges = touched_hour_ranges(spans)
        rows = lakehouse.read_arrow(
            control.RAW,
            version=raw_version,
            where=subject_rows & any_of(half_open("ts", a, b) for a, b in ranges),
        )
        where = subject_rows & any_of(half_open("hour", a, b) for a, b in ranges)
    hourly = hourly_rollup(rows, control.HOURLY_SCHEMA)
    commit = lakehouse.overwrite(
        control.HOURLY,
        hourly,
        where=where,
        metadata=metadata(subject_key=subject, raw_version=raw_version),
        app_transaction=AppTransaction(app_id(subject), raw_version),
    )
    regime: Regime = "from_zero" if lost else ("first" if ranges is None else "late")
    hours = hourly.num_rows if ranges is None else hours_within(ranges)
    return Reconciled(regime, raw_version, rows.num_rows, 0, None, hours, commit, lost, hourly)
