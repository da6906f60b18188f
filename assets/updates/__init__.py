"""Updates patterns: Merger (`devices`) and Stateful Merger (`device_catalog`)."""

import dagster as dg

from assets.updates.merger import devices
from assets.updates.stateful_merger import device_catalog

# Each day builds on the table the days before it left, so runs of one of these jobs go
# one at a time, in the order they were queued: `platform/dagster.yaml` limits the tag to
# one run per value.
IN_ORDER = "updates/in_order"

devices_job = dg.define_asset_job(
    "devices_job",
    selection=[devices],
    description="Merge days of devices_cdc into `devices`, oldest first (one MERGE per day, "
    "each once; a range is one run). One run at a time.",
    tags={IN_ORDER: "devices"},
)
device_catalog_job = dg.define_asset_job(
    "device_catalog_job",
    selection=[device_catalog],
    description="Merge days of device_catalog in order (a range restores once, then merges "
    "each day; one run). One run at a time.",
    tags={IN_ORDER: "device_catalog"},
)

assets = [devices, device_catalog]
jobs = [devices_job, device_catalog_job]

__all__ = [
    "IN_ORDER",
    "assets",
    "device_catalog",
    "device_catalog_job",
    "devices",
    "devices_job",
    "jobs",
]
