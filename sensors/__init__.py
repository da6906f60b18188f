"""Sensors: file-arrival and late-data sensors. None of them starts Spark."""

from sensors.event_batches import event_batch_files
from sensors.telemetry_files import telemetry_files
from sensors.visits_late_files import visits_late_files

sensors = [visits_late_files, telemetry_files, event_batch_files]

__all__ = ["event_batch_files", "sensors", "telemetry_files", "visits_late_files"]
