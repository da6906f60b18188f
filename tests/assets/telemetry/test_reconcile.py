"""The reconciler's decisions and arithmetic (pure), each named for the failure it guards."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc

from assets.telemetry.control import HOUR_START_SCHEMA, HOURLY_SCHEMA, RAW_SCHEMA
from assets.telemetry.reconcile import (
    DirtySpan,
    by_hour,
    carry_of,
    coalesce_span,
    dirty_frontier,
    hour_starts,
    merge_sums,
    pending_spans,
    plan_windows,
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


def test_in_hour_sums_order_by_ts_then_source_then_line_and_restart_each_hour():
    rows = raw(
        [
            (at(5), "b", 2, 1, 0, 0),
            (at(5), "a", 9, 10, 0, 0),
            (at(1), "b", 3, 100, 1, 1),
            (at(61), "a", 1, 1000, 0, 0),
            (at(62), "a", 2, 7, 0, 1),
        ]
    )
    within, sums = by_hour(rows)
    assert [
        (r["hour"], r["source"], r["line"], r["hour_cum_in_spec"], r["hour_cum_mispicks"])
        for r in within.to_pylist()
    ] == [
        (at(0), "b", 3, 100, 1),
        (at(0), "a", 9, 110, 1),
        (at(0), "b", 2, 111, 1),
        (at(60), "a", 1, 1000, 0),
        (at(60), "a", 2, 1007, 1),
    ]
    assert [(r["hour"], r["in_spec"], r["mispicks"], r["rows"]) for r in sums.to_pylist()] == [
        (at(0), 111, 1, 3),
        (at(60), 1007, 1, 2),
    ]


def test_an_hour_starts_from_the_totals_of_every_hour_before_it_whatever_their_order():
    _, sums = by_hour(
        raw([(at(130), "a", 1, 5, 1, 0), (at(1), "a", 2, 2, 0, 1), (at(70), "b", 1, 3, 0, 0)])
    )
    shuffled = sums.take([2, 0, 1])
    starts = hour_starts(shuffled, HOUR_START_SCHEMA).to_pylist()
    assert [(r["hour"], r["start_in_spec"], r["start_mispicks"]) for r in starts] == [
        (at(0), 0, 0),
        (at(60), 2, 1),
        (at(120), 5, 1),
    ]


def test_scans_gather_quiet_hours_cut_busy_ones_and_cover_every_dirty_hour():
    estimate = {at(0): 600.0, at(60): 600.0, at(120): 600.0, at(180): 5000.0, at(240): 10.0}
    assert plan_windows(estimate, None, 1000) == [
        (None, at(60)),
        (at(60), at(120)),
        (at(120), at(180)),
        # 5,000 rows in an hour: five windows of 12 minutes, the last open to later hours.
        (at(180), at(192)),
        (at(192), at(204)),
        (at(204), at(216)),
        (at(216), at(228)),
        (at(228), at(240)),
        (at(240), None),
    ]
    assert plan_windows(estimate, [(at(60), at(180)), (at(240), at(300))], 2000) == [
        (at(60), at(180)),
        (at(240), at(300)),
    ]
    # Hours the estimate does not know (files without states) are still covered.
    assert plan_windows({}, None, 1000) == [(None, None)]


def test_an_hour_cut_across_windows_sums_exactly_as_in_one():
    rows = raw([(at(m), "a", m + 2, m, 1, m % 2) for m in range(0, 120, 7)])
    whole_within, whole_sums = by_hour(rows)
    parts, sums, carry = [], [], None
    for start, end in [(0, 20), (20, 50), (50, 61), (61, 120)]:  # cut inside both hours
        part = rows.filter(
            pc.and_(
                pc.greater_equal(rows["ts"], pa.scalar(at(start), rows["ts"].type)),
                pc.less(rows["ts"], pa.scalar(at(end), rows["ts"].type)),
            )
        )
        part_within, part_sums = by_hour(part, carry)
        carry = carry_of(part_within) or carry
        parts.append(part_within)
        sums.append(part_sums)
    assert pa.concat_tables(parts).to_pylist() == whole_within.to_pylist()
    assert merge_sums(sums, HOURLY_SCHEMA).to_pylist() == (
        whole_sums.cast(HOURLY_SCHEMA).to_pylist()
    )


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
