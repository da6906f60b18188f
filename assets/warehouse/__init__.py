"""Warehouse ingestion: event batches staged, deduplicated, audited and MERGEd into
`user_events` (write-audit-publish, newer-wins MERGE with hash keys and tombstones); and
enriched run directories shredded and loaded through a load manifest (`manifest/`)."""

from assets.warehouse.manifest.pipeline import (
    ManifestSettings,
    enriched_run_job,
    enriched_runs,
    shredded_events,
    skip_enriched_run,
    warehouse_events,
)
from assets.warehouse.user_events import (
    EventSettings,
    event_batch_job,
    event_batches,
    user_events,
    user_events_staging,
)

assets = [user_events_staging, user_events, shredded_events, warehouse_events]
jobs = [event_batch_job, enriched_run_job, skip_enriched_run]

__all__ = [
    "EventSettings",
    "ManifestSettings",
    "enriched_run_job",
    "enriched_runs",
    "assets",
    "event_batch_job",
    "jobs",
    "event_batches",
    "user_events",
    "user_events_staging",
]
