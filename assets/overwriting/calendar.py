"""Day and week identity for the visits partitions.

A week is keyed by its Monday's date (`YYYY-MM-DD`, Dagster's weekly key). It is never
derived from `%Y-%W` or a week number alone: week 2024-12-30 holds Dec 30 2024 to Jan 5
2025 and belongs to ISO year 2025, which is where freezing folds it.
"""

from __future__ import annotations

import datetime as dt
import functools
import re

DAY_FOLDER_PATTERN = r"^visits/date=(\d{4}-\d{2}-\d{2})/"
"""A visits file's path, its event day captured (Python and Spark regex alike)."""
# The layout is visits/date=YYYY-MM-DD/<file>: a file in a deeper folder follows none.
_DAY_FOLDER = re.compile(DAY_FOLDER_PATTERN.removesuffix("/") + "$")


def week_start(day: dt.date) -> dt.date:
    """The Monday starting `day`'s week."""
    return day - dt.timedelta(days=day.weekday())


def days_of_week(monday: dt.date) -> list[dt.date]:
    if monday.weekday() != 0:
        raise ValueError(f"week key {monday.isoformat()} is not a Monday")
    return [monday + dt.timedelta(days=i) for i in range(7)]


def iso_year(monday: dt.date) -> int:
    """The ISO year a week belongs to (the year of its Thursday)."""
    return monday.isocalendar().year


def day_folder(day: dt.date) -> str:
    return f"visits/date={day.isoformat()}"


def day_of_file(path: str) -> dt.date | None:
    """The event day a landed visits file belongs to, from its `date=` folder; None when
    the path does not follow the layout."""
    folder, _, name = path.rpartition("/")
    return day_of_folder(folder) if name else None


@functools.lru_cache(maxsize=4096)
def day_of_folder(folder: str) -> dt.date | None:
    """The event day of the files directly in `folder` (`visits/date=YYYY-MM-DD`); None
    when it follows no layout. Parsed once per folder: a sensor's tick asks for every
    landed file's day."""
    match = _DAY_FOLDER.match(folder)
    if not match:
        return None
    try:
        return dt.date.fromisoformat(match.group(1))
    except ValueError:
        return None
