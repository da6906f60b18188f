"""Overwriting patterns: Fast Metadata Cleaner (`visits_weekly`) and Data Overwrite
(`visits_daily`), over the same visits source."""

from assets.jobs import asset_job
from assets.overwriting.data_overwrite import daily_partitions, visits_daily
from assets.overwriting.fast_metadata_cleaner import visits_weekly, weekly_partitions
from assets.overwriting.freezing import freeze_visits_weeks

visits_daily_job = asset_job(
    visits_daily,
    "Materialize days of visits_daily (a range is one run, one commit per day).",
)
visits_weekly_job = asset_job(
    visits_weekly,
    "Materialize weeks of visits_weekly (a range is one run, one table per week).",
)

assets = [visits_weekly, visits_daily]
jobs = [visits_daily_job, visits_weekly_job, freeze_visits_weeks]

__all__ = [
    "assets",
    "daily_partitions",
    "freeze_visits_weeks",
    "jobs",
    "visits_daily",
    "visits_daily_job",
    "visits_weekly",
    "visits_weekly_job",
    "weekly_partitions",
]
