"""The demo's days: where Dagster's UI looks first, and the same on every run of one
instance."""

from __future__ import annotations

import datetime as dt

import pytest

from demo.dagster_dev import DemoError
from demo.dates import CHECKSUMS_FILE, PIN, START_FILE, DemoDates, default_start, demo_dates


def every_day(dates: DemoDates) -> list[dt.date]:
    return [
        *dates.visit_days,
        *dates.update_days,
        *dates.payment_days,
        dates.telemetry_start.date(),
        (dates.telemetry_start + dt.timedelta(hours=4 * 12)).date(),
        dates.warehouse_start.date(),
        (dates.warehouse_start + dt.timedelta(days=1)).date(),
    ]


@pytest.mark.parametrize("offset", range(14))
def test_a_first_run_lands_every_day_in_the_last_90_days_and_none_today(offset):
    today = dt.date(2026, 11, 24) + dt.timedelta(days=offset)
    dates = DemoDates(default_start(today))
    assert dates.start.weekday() == 0
    days = every_day(dates)
    # Daily partitions exist up to yesterday; the Materialize dialog offers 90 days.
    assert max(days) < today
    assert min(days) >= today - dt.timedelta(days=90)
    assert len(dates.visit_days) == 42 and dates.visit_days[-1].weekday() == 6


def test_the_first_run_keeps_its_start_and_later_runs_reuse_it(tmp_path):
    first = demo_dates(tmp_path, {}, today=dt.date(2026, 11, 24))
    assert (tmp_path / START_FILE).read_text().strip() == first.start.isoformat()
    later = demo_dates(tmp_path, {}, today=dt.date(2027, 3, 1))
    assert later == first


def test_a_pinned_start_is_kept_and_must_be_a_monday(tmp_path):
    assert demo_dates(tmp_path, {PIN: "2024-12-02"}).start == dt.date(2024, 12, 2)
    assert demo_dates(tmp_path, {}).start == dt.date(2024, 12, 2)
    with pytest.raises(DemoError, match="2024-12-03 is a Tuesday"):
        demo_dates(tmp_path / "other", {PIN: "2024-12-03"})
    with pytest.raises(DemoError, match="'yesterday' is not a date"):
        demo_dates(tmp_path / "other", {PIN: "yesterday"})


def test_a_pin_other_than_the_instance_s_start_is_refused_naming_both(tmp_path):
    demo_dates(tmp_path, {PIN: "2024-12-02"})
    with pytest.raises(DemoError, match=r"DEMO_START=2026-09-28, but .* starts on 2024-12-02"):
        demo_dates(tmp_path, {PIN: "2026-09-28"})


def test_an_instance_of_the_fixed_date_demo_is_refused_before_anything_lands(tmp_path):
    (tmp_path / CHECKSUMS_FILE).write_text("{}")
    with pytest.raises(DemoError, match="make clean"):
        demo_dates(tmp_path, {})
    assert not (tmp_path / START_FILE).exists()
