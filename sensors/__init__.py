"""Sensors: file-arrival and late-data sensors, and `dead_runs`. None of them starts Spark."""

from sensors.change_files import change_files
from sensors.dead_runs import dead_runs
from sensors.enriched_runs import enriched_run_directories, stuck_enriched_runs
from sensors.event_batches import event_batch_files
from sensors.telemetry_files import telemetry_files
from sensors.visits_late_files import visits_late_files

sensors = [
    visits_late_files,
    telemetry_files,
    change_files,
    event_batch_files,
    enriched_run_directories,
    stuck_enriched_runs,
    dead_runs,
]

__all__ = [
    "change_files",
    "dead_runs",
    "enriched_run_directories",
    "event_batch_files",
    "stuck_enriched_runs",
    "sensors",
    "telemetry_files",
    "visits_late_files",
]
