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

__all__ = [
    "SUBJECT_TAG",
    "TelemetrySettings",
    "blacklist_telemetry_file",
    "compact_telemetry_tables",
    "reingest_telemetry_file",
    "release_quarantined_file",
    "subjects",
    "telemetry_hourly",
    "telemetry_job",
    "telemetry_raw",
    "telemetry_running_totals",
]
