"""Backfills of many partitions launched side by side, each run its own process as the run
launcher starts them: 52 weeks of `visits_weekly` (from a year of `visits_daily` built
before) and 30 days of `visits_daily`, in overlapping ranges (a user who launches a
second backfill before the first ends), so runs race on the same partitions. No commit
is lost, every partition is right, and each day's input is committed once. Slow: a few
minutes on 2 cores (`make test-slow`)."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path

import dagster as dg
import pytest
from support import day_of_visits, materialize_side_by_side, partition_range

from assets.overwriting import visits_daily
from assets.overwriting.data_overwrite import VISITS_DAILY
from assets.overwriting.exposition import active_tables, manifest_entries

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DEFINITIONS = PROJECT_ROOT / "platform" / "definitions.py"
FIRST_MONDAY = dt.date(2024, 1, 1)
VISITS_PER_DAY = 6

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture
def engine() -> str:
    """The engine is the same code path for these runs; delta-rs keeps the trial short."""
    return "delta-rs"


def land_days(write_visits, days: list[dt.date]) -> None:
    for day in days:
        write_visits(day, "part.jsonl", day_of_visits(day, VISITS_PER_DAY, prefix=f"v{day:%m%d}"))


def launch_ranges(
    tmp_path: Path, lakehouse, landing, asset: str, ranges: list[tuple[str, str]]
) -> Path:
    """`dagster asset materialize --partition-range` for each range, all at once (what the
    UI's backfill of a range launches for a single-run asset); returns the Dagster home."""
    home = tmp_path / "dagster_home"
    materialize_side_by_side(
        home,
        lakehouse,
        landing,
        [["--select", asset, "--partition-range", f"{a}...{b}"] for a, b in ranges],
    )
    return home


def materialized_partitions(home: Path, asset: str) -> Counter:
    with dg.DagsterInstance.from_config(str(home)) as instance:
        records = instance.fetch_materializations(dg.AssetKey(asset), limit=1000).records
    return Counter(r.partition_key for r in records)


def test_52_weeks_in_overlapping_concurrent_backfills(
    tmp_path, resources, lakehouse, landing, write_visits
):
    mondays = [FIRST_MONDAY + dt.timedelta(weeks=i) for i in range(52)]
    days = [m + dt.timedelta(days=d) for m in mondays for d in range(7)]
    land_days(write_visits, days)
    # The weeks' days of visits_daily, which the weeks read: one range run.
    dg.materialize([visits_daily], resources=resources, tags=partition_range(days[0], days[-1]))
    ranges = [(mondays[0], mondays[20]), (mondays[15], mondays[35]), (mondays[30], mondays[51])]
    home = launch_ranges(
        tmp_path,
        lakehouse,
        landing,
        "visits_weekly",
        [(a.isoformat(), b.isoformat()) for a, b in ranges],
    )
    # Every week is exposed, in its own table, with exactly its seven days of visits.
    tables = active_tables(manifest_entries(lakehouse))
    assert sorted(tables) == mondays
    for monday, table in tables.items():
        rows = lakehouse.read_arrow(table).to_pylist()
        assert len(rows) == 7 * VISITS_PER_DAY, (monday, table)
        assert {r["week_start"] for r in rows} == {monday}
    # Each week materialized once per range that holds it: nothing lost, nothing extra.
    held = Counter(m.isoformat() for a, b in ranges for m in mondays if a <= m <= b)
    assert materialized_partitions(home, "visits_weekly") == held


def test_30_days_in_overlapping_concurrent_backfills(tmp_path, lakehouse, landing, write_visits):
    days = [FIRST_MONDAY + dt.timedelta(days=i) for i in range(30)]
    land_days(write_visits, days)
    ranges = [(days[0], days[14]), (days[10], days[24]), (days[20], days[29])]
    home = launch_ranges(
        tmp_path,
        lakehouse,
        landing,
        "visits_daily",
        [(a.isoformat(), b.isoformat()) for a, b in ranges],
    )
    rows = lakehouse.read_arrow(VISITS_DAILY).to_pylist()
    assert Counter(r["event_date"] for r in rows) == dict.fromkeys(days, VISITS_PER_DAY)
    # Each day's input is committed once, whichever run got there first; the others
    # report it skipped.
    written = [
        h.metadata["partition_key"]
        for h in lakehouse.history(VISITS_DAILY)
        if h.metadata.get("transaction_app_id")
    ]
    assert sorted(written) == sorted(day.isoformat() for day in days)
    held = Counter(d.isoformat() for a, b in ranges for d in days if a <= d <= b)
    assert materialized_partitions(home, "visits_daily") == held
