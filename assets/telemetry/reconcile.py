"""The dirty-range reconciler's decisions and arithmetic, as pure functions.

Each applied file change leaves its subject dirty over a time span (recorded with the
raw rows' commit and in the file's state, with the raw table version that applied it).
A derived table reflects a raw version (its Delta app transaction); every change
applied after that version is still to reconcile:

- running totals are prefix sums, so one dirty point invalidates everything after it:
  the spans coalesce to one frontier (their earliest start) and the totals are
  recomputed from there, seeded with the last row before it;
- hourly rollups are not cumulative: only the hours the spans touch are recomputed.
"""

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

HOUR = dt.timedelta(hours=1)
ORDER = [("ts", "ascending"), ("source", "ascending"), ("line", "ascending")]
COUNTS = ("in_spec", "out_of_spec", "mispicks")
CUMULATIVE = tuple(f"cum_{name}" for name in COUNTS)


@dataclass(frozen=True)
class DirtySpan:
    start: dt.datetime
    end: dt.datetime
    raw_version: int
    """The raw table version whose commit made the span dirty."""


def pending_spans(spans: Iterable[DirtySpan], reflected_version: int | None) -> list[DirtySpan]:
    """Spans committed after the raw version a derived table reflects."""
    return [s for s in spans if reflected_version is None or s.raw_version > reflected_version]


def dirty_frontier(spans: Iterable[DirtySpan]) -> dt.datetime | None:
    """Overlapping (or not) dirty spans coalesce to one frontier: their earliest start."""
    starts = [s.start for s in spans]
    return min(starts) if starts else None


def floor_hour(ts: dt.datetime) -> dt.datetime:
    return ts.replace(minute=0, second=0, microsecond=0)


def touched_hour_ranges(spans: Iterable[DirtySpan]) -> list[tuple[dt.datetime, dt.datetime]]:
    """Half-open hour ranges [start, end) covering every span, overlapping ones merged."""
    ranges = sorted((floor_hour(s.start), floor_hour(s.end) + HOUR) for s in spans)
    merged: list[tuple[dt.datetime, dt.datetime]] = []
    for start, end in ranges:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def coalesce_span(
    previous: DirtySpan | None,
    start: dt.datetime,
    end: dt.datetime,
    raw_version: int,
    *,
    reconciled_version: int | None,
) -> DirtySpan:
    """A file's dirty span after a new change: a previous change not yet reconciled by
    every derived table (its version is above `reconciled_version`, the lowest version
    they reflect) still needs repair, so the new span covers both."""
    if previous is not None and (
        reconciled_version is None or previous.raw_version > reconciled_version
    ):
        start, end = min(start, previous.start), max(end, previous.end)
    return DirtySpan(start, end, raw_version)


HourRange = tuple[dt.datetime, dt.datetime]
Window = tuple[dt.datetime | None, dt.datetime | None]
"""A half-open time window [start, end); None leaves that side open."""


def by_hour(rows: pa.Table) -> tuple[pa.Table, pa.Table]:
    """The raw `rows` of whole hours (of one subject) as (within, sums):

    - within: each row with its hour and its counts summed from the start of that hour,
      ordered by ts, source, line (columns subject_key, hour, ts, source, line,
      hour_cum_<count>);
    - sums: per hour, the counts summed and the number of rows (subject_key, hour,
      <count>, rows), ordered by hour.

    Vectorized: one sort, NumPy prefix sums, differences at the hours' boundaries."""
    ordered = rows.sort_by(ORDER)
    hours = pc.floor_temporal(ordered["ts"], unit="hour")
    micros = hours.cast(pa.int64()).to_numpy()
    starts = (
        np.flatnonzero(np.r_[True, micros[1:] != micros[:-1]])
        if len(micros)
        else np.zeros(0, np.int64)
    )
    lengths = np.diff(np.r_[starts, len(micros)]).astype(np.int64)
    first_of_hour = hours.take(pa.array(starts, pa.int64()))
    subject = ordered["subject_key"]
    within = {
        "subject_key": subject,
        "hour": hours,
        **{name: ordered[name] for name in ("ts", "source", "line")},
    }
    sums = {"subject_key": subject.take(pa.array(starts, pa.int64())), "hour": first_of_hour}
    for name in COUNTS:
        cumulative = np.cumsum(ordered[name].to_numpy(zero_copy_only=False), dtype=np.int64)
        before = np.r_[np.int64(0), cumulative][starts]
        within[f"hour_cum_{name}"] = pa.array(cumulative - np.repeat(before, lengths))
        ends = np.r_[before[1:], cumulative[-1:]] if len(cumulative) else before
        sums[name] = pa.array(ends - before, pa.int64())
    sums["rows"] = pa.array(lengths, pa.int64())
    return pa.table(within), pa.table(sums)


def hour_starts(sums: pa.Table, schema: pa.Schema) -> pa.Table:
    """Each hour of a subject's `sums` (every hour with rows, any order) with the totals
    of all rows before it (start_<count>): a checkpoint per hour, so that the running
    total of a row is its hour's start plus its in-hour sum."""
    ordered = sums.sort_by([("hour", "ascending")])
    columns = {name: ordered[name] for name in ("subject_key", "hour", *COUNTS, "rows")}
    for name in COUNTS:
        values = ordered[name].to_numpy(zero_copy_only=False)
        columns[f"start_{name}"] = pa.array(np.cumsum(values) - values, pa.int64())
    return pa.table(columns).cast(schema)


def plan_windows(
    rows_by_hour: dict[dt.datetime, float], ranges: Sequence[HourRange] | None, budget: int
) -> list[Window]:
    """Cut the hour `ranges` (None: all of time) into windows of whole hours, each
    expected to hold at most `budget` rows by `rows_by_hour` (an hour above the budget
    is a window of its own), so a scan holds one window's rows at a time."""
    spans: list[Window] = [(None, None)] if ranges is None else list(ranges)
    windows: list[Window] = []
    for start, end in spans:
        cut, held = start, 0.0
        for hour in sorted(rows_by_hour):
            if (start is not None and hour < start) or (end is not None and hour >= end):
                continue
            if held and held + rows_by_hour[hour] > budget:
                windows.append((cut, hour))
                cut, held = hour, 0.0
            held += rows_by_hour[hour]
        windows.append((cut, end))
    return windows


def hours_within(ranges: Sequence[tuple[dt.datetime, dt.datetime]]) -> int:
    return sum((end - start) // HOUR for start, end in ranges)
