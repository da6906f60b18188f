"""Warehouse ingestion: event batches staged, deduplicated, audited and MERGEd into
`user_events` (write-audit-publish, newer-wins MERGE with hash keys and tombstones)."""

import dagster as dg

from assets.warehouse.user_events import (
    EventSettings,
    event_batches,
    user_events,
    user_events_staging,
)

assets = [user_events_staging, user_events]
event_batch_job = dg.define_asset_job(
    "event_batch",
    selection=dg.AssetSelection.assets(user_events_staging, user_events),
    partitions_def=event_batches,
    description="Stage, audit and publish one event batch (write-audit-publish).",
)
jobs = [event_batch_job]

__all__ = [
    "EventSettings",
    "assets",
    "event_batch_job",
    "jobs",
    "event_batches",
    "user_events",
    "user_events_staging",
]
