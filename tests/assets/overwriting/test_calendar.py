import datetime as dt

from assets.overwriting.calendar import day_of_file, days_of_week, iso_year, week_start


def test_week_across_the_year_boundary_keeps_its_monday_identity():
    # Guards: %Y-%W style keys split week 2024-12-30 into two "weeks" of two years.
    monday = dt.date(2024, 12, 30)
    assert week_start(dt.date(2025, 1, 5)) == monday
    assert days_of_week(monday)[-1] == dt.date(2025, 1, 5)
    assert iso_year(monday) == 2025
    assert iso_year(dt.date(2024, 12, 23)) == 2024


def test_day_of_file_reads_only_the_date_folder_layout():
    assert day_of_file("visits/date=2024-02-29/a.jsonl") == dt.date(2024, 2, 29)
    assert day_of_file("visits/date=2023-02-29/a.jsonl") is None
    assert day_of_file("visits/a.jsonl") is None
    # A file in a folder below the day's follows no layout: no day's input.
    assert day_of_file("visits/date=2024-02-29/sub/a.jsonl") is None
