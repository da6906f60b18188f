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
import math
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


Seed = tuple[int, int, int]
Carry = tuple[dt.datetime, Seed]
"""An hour split across windows, and its counts summed over the rows already seen."""


def by_hour(rows: pa.Table, carry: Carry | None = None) -> tuple[pa.Table, pa.Table]:
    """The raw `rows` of a window (of one subject) as (within, sums):

    - within: each row with its hour and its counts summed from the start of that hour,
      ordered by ts, source, line (columns subject_key, hour, ts, source, line,
      hour_cum_<count>); when the window begins inside the hour of `carry`, that hour's
      sums go on from the carried ones;
    - sums: per hour, the counts of these rows summed and their number (subject_key,
      hour, <count>, rows), ordered by hour: an hour split across windows has a part in
      each (`merge_sums` adds them up).

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
    continues = carry is not None and len(micros) and first_of_hour[0].as_py() == carry[0]
    carried = carry if continues else None
    subject = ordered["subject_key"]
    within = {
        "subject_key": subject,
        "hour": hours,
        **{name: ordered[name] for name in ("ts", "source", "line")},
    }
    sums = {"subject_key": subject.take(pa.array(starts, pa.int64())), "hour": first_of_hour}
    for i, name in enumerate(COUNTS):
        cumulative = np.cumsum(ordered[name].to_numpy(zero_copy_only=False), dtype=np.int64)
        before = np.r_[np.int64(0), cumulative][starts]
        in_hour = cumulative - np.repeat(before, lengths)
        if carried is not None:
            in_hour[: lengths[0]] += carried[1][i]
        within[f"hour_cum_{name}"] = pa.array(in_hour)
        sums[name] = pa.array(_group_totals(ordered[name], starts), pa.int64())
    sums["rows"] = pa.array(lengths, pa.int64())
    return pa.table(within), pa.table(sums)


def _group_totals(values: pa.ChunkedArray, starts: np.ndarray) -> np.ndarray:
    """Sums of consecutive groups of `values` beginning at `starts`."""
    array = values.to_numpy(zero_copy_only=False)
    return np.add.reduceat(array, starts) if len(starts) else np.zeros(0, np.int64)


def carry_of(within: pa.Table) -> Carry | None:
    """What the next window of a split hour goes on from: the last row's hour and sums."""
    if within.num_rows == 0:
        return None
    last = within.slice(within.num_rows - 1).to_pylist()[0]
    return last["hour"], tuple(last[f"hour_cum_{name}"] for name in COUNTS)


def merge_sums(parts: Sequence[pa.Table], schema: pa.Schema) -> pa.Table:
    """The hour sums of several windows as one row per hour (split hours added up)."""
    if not parts:
        return schema.empty_table()
    merged = (
        pa.concat_tables([part.cast(schema) for part in parts])
        .group_by(["subject_key", "hour"])
        .aggregate([(name, "sum") for name in (*COUNTS, "rows")])
    )
    renamed = merged.rename_columns({f"{name}_sum": name for name in (*COUNTS, "rows")})
    return renamed.select(schema.names).cast(schema).sort_by([("hour", "ascending")])


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
    """Cut the hour `ranges` (None: all of time) into consecutive windows, each expected
    to hold at most `budget` rows by `rows_by_hour`, so a scan holds one window's rows at
    a time: quiet hours are gathered into one window, a busy hour is cut into equal
    parts (`by_hour` carries its sums from one part to the next)."""
    spans: list[Window] = [(None, None)] if ranges is None else list(ranges)
    windows: list[Window] = []
    for start, end in spans:
        cut: dt.datetime | None = start
        held = 0.0
        for hour in sorted(rows_by_hour):
            if (start is not None and hour < start) or (end is not None and hour >= end):
                continue
            estimate = rows_by_hour[hour]
            if estimate > budget:
                parts = math.ceil(estimate / budget)
                if cut is None or cut < hour:
                    windows.append((cut, hour))
                step = HOUR / parts
                windows += [(hour + i * step, hour + (i + 1) * step) for i in range(parts - 1)]
                cut, held = hour + (parts - 1) * step, estimate / parts
                continue
            if held and held + estimate > budget:
                windows.append((cut, hour))
                cut, held = hour, 0.0
            held += estimate
        windows.append((cut, end))
    return windows


def hours_within(ranges: Sequence[tuple[dt.datetime, dt.datetime]]) -> int:
    return sum((end - start) // HOUR for start, end in ranges)
