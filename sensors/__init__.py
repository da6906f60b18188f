"""Sensors: file-arrival and late-data sensors. None of them starts Spark."""

from sensors.telemetry_files import telemetry_files
from sensors.visits_late_files import visits_late_files

sensors = [visits_late_files, telemetry_files]

__all__ = ["sensors", "telemetry_files", "visits_late_files"]
