"""Sensors: file-arrival and late-data sensors. None of them starts Spark."""

from sensors.visits_late_files import visits_late_files

sensors = [visits_late_files]

__all__ = ["sensors", "visits_late_files"]
