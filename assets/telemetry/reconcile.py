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


Seed = tuple[int, int, int]
ZERO: Seed = (0, 0, 0)


def running_totals(rows: pa.Table, seed: Seed, schema: pa.Schema) -> pa.Table:
    """Cumulative counts of one subject's raw `rows`, ordered by ts, source, line, starting
    from `seed` (the totals of the last row before them). Vectorized: NumPy prefix sums."""
    ordered = rows.sort_by(ORDER)
    columns = {name: ordered[name] for name in ("subject_key", "ts", "source", "line")}
    for name, cumulative, start in zip(COUNTS, CUMULATIVE, seed, strict=True):
        values = ordered[name].to_numpy(zero_copy_only=False)
        columns[cumulative] = pa.array(np.cumsum(values, dtype=np.int64) + start, pa.int64())
    return pa.table(columns, schema=schema)


def last_totals(totals: pa.Table) -> Seed | None:
    """The totals of the last row (by ts, source, line) of `totals`, or None when empty."""
    if totals.num_rows == 0:
        return None
    last = totals.sort_by(ORDER).slice(totals.num_rows - 1).to_pylist()[0]
    return tuple(last[name] for name in CUMULATIVE)  # type: ignore[return-value]


def hourly_rollup(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """Per (subject, UTC hour): summed counts and the number of rows."""
    if rows.num_rows == 0:
        return schema.empty_table()
    with_hour = rows.append_column("hour", pc.floor_temporal(rows["ts"], unit="hour"))
    grouped = with_hour.group_by(["subject_key", "hour"]).aggregate(
        [(name, "sum") for name in COUNTS] + [("ts", "count")]
    )
    renamed = grouped.rename_columns(
        {**{f"{name}_sum": name for name in COUNTS}, "ts_count": "rows"}
    )
    return renamed.select(schema.names).cast(schema).sort_by([("hour", "ascending")])


def hours_within(ranges: Sequence[tuple[dt.datetime, dt.datetime]]) -> int:
    return sum((end - start) // HOUR for start, end in ranges)
