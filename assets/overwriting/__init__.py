"""Overwriting patterns: Data Overwrite (`visits_daily`, from the visits files) and Fast
Metadata Cleaner (`visits_weekly`, from visits_daily's days)."""

import dagster as dg

from assets.overwriting.data_overwrite import daily_partitions, visits_daily
from assets.overwriting.fast_metadata_cleaner import visits_weekly, weekly_partitions
from assets.overwriting.freezing import freeze_visits_weeks

visits_daily_job = dg.define_asset_job(
    "visits_daily_job",
    selection=[visits_daily],
    description="Materialize days of visits_daily (a range is one run, one commit per day).",
)

assets = [visits_weekly, visits_daily]
jobs = [visits_daily_job, freeze_visits_weeks]

__all__ = [
    "assets",
    "daily_partitions",
    "freeze_visits_weeks",
    "jobs",
    "visits_daily",
    "visits_daily_job",
    "visits_weekly",
    "weekly_partitions",
]
