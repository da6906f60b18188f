"""Telemetry: out-of-order, appended and duplicated tool report files, with running totals
and hourly rollups kept exactly right by a dirty-range reconciler
(docs/patterns/telemetry.md)."""

from assets.telemetry.operator_jobs import (
    blacklist_telemetry_file,
    reingest_telemetry_file,
    release_quarantined_file,
)
from assets.telemetry.pipeline import (
    telemetry_hourly,
    telemetry_job,
    telemetry_raw,
    telemetry_running_totals,
)
from assets.telemetry.settings import TelemetrySettings
from assets.telemetry.subjects import SUBJECT_TAG, subjects
from assets.telemetry.upkeep import compact_telemetry_tables

assets = [telemetry_raw, telemetry_running_totals, telemetry_hourly]
jobs = [telemetry_job, blacklist_telemetry_file, reingest_telemetry_file, release_quarantined_file]
schedules = [compact_telemetry_tables]

__all__ = [
    "SUBJECT_TAG",
    "TelemetrySettings",
    "assets",
    "jobs",
    "schedules",
    "subjects",
    "telemetry_hourly",
    "telemetry_job",
    "telemetry_raw",
    "telemetry_running_totals",
]
