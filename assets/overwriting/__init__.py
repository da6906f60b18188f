"""Overwriting patterns: Fast Metadata Cleaner (`visits_weekly`) and Data Overwrite
(`visits_daily`), over the same visits source."""

import dagster as dg

from assets.overwriting.data_overwrite import daily_partitions, visits_daily
from assets.overwriting.fast_metadata_cleaner import visits_weekly, weekly_partitions
from assets.overwriting.freezing import freeze_visits_weeks

visits_daily_job = dg.define_asset_job(
    "visits_daily_job",
    selection=[visits_daily],
    description="Materialize days of visits_daily (a range is one run, one commit per day).",
)
visits_weekly_job = dg.define_asset_job(
    "visits_weekly_job",
    selection=[visits_weekly],
    description="Materialize weeks of visits_weekly (a range is one run, one table per week).",
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
