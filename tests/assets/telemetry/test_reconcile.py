"""The reconciler's decisions and arithmetic (pure), each named for the failure it guards."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from assets.telemetry.control import HOURLY_SCHEMA, RAW_SCHEMA, TOTALS_SCHEMA
from assets.telemetry.reconcile import (
    DirtySpan,
    coalesce_span,
    dirty_frontier,
    hourly_rollup,
    last_totals,
    pending_spans,
    running_totals,
    touched_hour_ranges,
)

T0 = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)


def at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def raw(rows: list[tuple]) -> pa.Table:
    return pa.Table.from_pylist(
        [
            dict(
                subject_key="s", ts=ts, source=src, line=line, in_spec=a, out_of_spec=b, mispicks=c
            )
            for ts, src, line, a, b, c in rows
        ],
        schema=RAW_SCHEMA,
    )


def test_prefix_sums_order_by_ts_then_source_then_line_and_start_from_the_seed():
    rows = raw([(at(5), "b", 2, 1, 0, 0), (at(5), "a", 9, 10, 0, 0), (at(1), "b", 3, 100, 1, 1)])
    totals = running_totals(rows, (1000, 10, 1), TOTALS_SCHEMA).to_pylist()
    assert [(r["source"], r["line"], r["cum_in_spec"]) for r in totals] == [
        ("b", 3, 1100),
        ("a", 9, 1110),
        ("b", 2, 1111),
    ]
    assert last_totals(running_totals(rows, (0, 0, 0), TOTALS_SCHEMA)) == (111, 1, 1)


def test_only_spans_after_the_reflected_version_are_dirty_and_they_coalesce_to_one_frontier():
    spans = [
        DirtySpan(at(50), at(60), 7),
        DirtySpan(at(10), at(20), 5),
        DirtySpan(at(30), at(90), 8),
    ]
    assert dirty_frontier(pending_spans(spans, 6)) == at(30)  # version 5 is reflected already
    assert dirty_frontier(pending_spans(spans, None)) == at(10)
    assert dirty_frontier(pending_spans(spans, 8)) is None


def test_touched_hours_merge_overlaps_and_leave_gaps_alone():
    spans = [
        DirtySpan(at(10), at(70), 1),
        DirtySpan(at(65), at(80), 2),
        DirtySpan(at(300), at(301), 3),
    ]
    assert touched_hour_ranges(spans) == [(at(0), at(120)), (at(300), at(360))]


def test_an_unreconciled_span_is_not_forgotten_when_the_file_changes_again():
    """Run 1 appended at 10:00 but failed before the totals; run 2 appends at 12:00: the
    totals must still be repaired from 10:00."""
    first = DirtySpan(at(600), at(700), 4)
    assert coalesce_span(first, at(720), at(800), 6, reconciled_version=3) == DirtySpan(
        at(600), at(800), 6
    )
    assert coalesce_span(first, at(720), at(800), 6, reconciled_version=4) == DirtySpan(
        at(720), at(800), 6
    )


def test_hourly_rollup_sums_per_hour_bucket():
    rows = raw([(at(1), "a", 2, 1, 2, 3), (at(59), "a", 3, 1, 0, 0), (at(60), "a", 4, 5, 0, 0)])
    assert hourly_rollup(rows, HOURLY_SCHEMA).to_pylist() == [
        dict(subject_key="s", hour=at(0), in_spec=2, out_of_spec=2, mispicks=3, rows=2),
        dict(subject_key="s", hour=at(60), in_spec=5, out_of_spec=0, mispicks=0, rows=1),
    ]
