"""The demo's calendar. Its days are relative to the day of its first run on an instance,
so its partitions sit where Dagster's UI looks first (the Materialize dialog offers the
last 90 days), and kept beside the instance, so every later run lands the same days and
can reproduce the previous run's checksums."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from demo.dagster_dev import DemoError

START_FILE = "demo-start"
CHECKSUMS_FILE = "demo-checksums.json"
PIN = "DEMO_START"
"""Environment variable: a Monday (YYYY-MM-DD) to start from instead of the kept one."""
WEEKS_OF_VISITS = 6
LAST_WEEK = 7 * (WEEKS_OF_VISITS - 1)
"""Days from the start to the last week of visits: devices, catalog and telemetry."""
AFTER_VISITS = 7 * WEEKS_OF_VISITS
"""Days from the start to the week after the visits: payments and the warehouse."""
SPAN = dt.timedelta(days=45)
"""From the first day of visits to the day after the last day anything happens."""


@dataclass(frozen=True)
class DemoDates:
    """Every date the demo writes, from `start`, a Monday: six weeks of visits, then the
    devices and catalog days in their last week, then payments and the warehouse's
    batches and runs in the week after."""

    start: dt.date

    def _day(self, offset: int) -> dt.date:
        return self.start + dt.timedelta(days=offset)

    def _days(self, first: int, count: int) -> list[dt.date]:
        return [self._day(first + i) for i in range(count)]

    @property
    def visit_days(self) -> list[dt.date]:
        return self._days(0, AFTER_VISITS)

    @property
    def update_days(self) -> list[dt.date]:
        return self._days(LAST_WEEK, 6)

    @property
    def payment_days(self) -> list[dt.date]:
        return self._days(AFTER_VISITS, 3)

    @property
    def telemetry_start(self) -> dt.datetime:
        """The first report's first hour (the telemetry reports span two days)."""
        return dt.datetime.combine(self._day(LAST_WEEK), dt.time(), tzinfo=dt.UTC)

    @property
    def warehouse_start(self) -> dt.datetime:
        """The first event's earliest time; the batches and enriched runs follow it."""
        return dt.datetime.combine(self._day(AFTER_VISITS), dt.time(9), tzinfo=dt.UTC)


def default_start(today: dt.date | None = None) -> dt.date:
    """The latest Monday from which everything the demo writes is over by yesterday
    (`today` by default the real one)."""
    latest = (today or dt.date.today()) - SPAN
    return latest - dt.timedelta(days=latest.weekday())


def _monday(text: str, where: str) -> dt.date:
    try:
        day = dt.date.fromisoformat(text.strip())
    except ValueError:
        raise DemoError(f"{where}: {text.strip()!r} is not a date (YYYY-MM-DD)") from None
    if day.weekday() != 0:
        raise DemoError(f"{where}: {day} is a {day:%A}; the demo's weeks start on a Monday")
    return day


def demo_dates(
    folder: Path, environ: Mapping[str, str] = os.environ, today: dt.date | None = None
) -> DemoDates:
    """The dates of the demo whose instance, checksums and data live under `folder`:
    those kept there by its first run, `DEMO_START` when set, else from today."""
    kept = folder / START_FILE
    start = _monday(kept.read_text(), str(kept)) if kept.exists() else None
    if environ.get(PIN):
        pinned = _monday(environ[PIN], PIN)
        if start is not None and pinned != start:
            raise DemoError(
                f"{PIN}={pinned}, but the demo data on this instance starts on {start} "
                f"({kept}); mixing them would leave both in the tables. Unset {PIN}, or "
                "`make clean` first."
            )
        start = pinned
    if start is None and (folder / CHECKSUMS_FILE).exists():
        raise DemoError(
            f"{folder} holds the tables of a demo from before its dates were kept in "
            f"{kept}, and this one's days would land beside them. `make clean` first (it "
            "removes .data)."
        )
    if start is None:
        start = default_start(today)
    if not kept.exists():
        folder.mkdir(parents=True, exist_ok=True)
        kept.write_text(f"{start.isoformat()}\n")
    return DemoDates(start)
