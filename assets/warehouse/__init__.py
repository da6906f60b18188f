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

__all__ = [
    "EventSettings",
    "ManifestSettings",
    "enriched_run_job",
    "enriched_runs",
    "event_batch_job",
    "event_batches",
    "shredded_events",
    "skip_enriched_run",
    "user_events",
    "user_events_staging",
    "warehouse_events",
]
