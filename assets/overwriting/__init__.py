"""Overwriting patterns: Data Overwrite (`visits_daily`, from the visits files) and Fast
Metadata Cleaner (`visits_weekly`, from visits_daily's days)."""

from assets.overwriting.data_overwrite import daily_partitions, visits_daily, visits_daily_job
from assets.overwriting.fast_metadata_cleaner import visits_weekly, weekly_partitions
from assets.overwriting.freezing import freeze_visits_weeks

__all__ = [
    "daily_partitions",
    "freeze_visits_weeks",
    "visits_daily",
    "visits_daily_job",
    "visits_weekly",
    "weekly_partitions",
]
