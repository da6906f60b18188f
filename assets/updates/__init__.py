"""Updates patterns: Merger (`devices`) and Stateful Merger (`device_catalog`)."""

import dagster as dg

from assets.updates.merger import devices
from assets.updates.stateful_merger import device_catalog

devices_job = dg.define_asset_job(
    "devices_job",
    selection=[devices],
    description="Merge days of devices_cdc into `devices` (one MERGE per day, each once).",
)
device_catalog_job = dg.define_asset_job(
    "device_catalog_job",
    selection=[device_catalog],
    description="Merge days of device_catalog in order (a range restores once, then merges "
    "each day; one run).",
)

assets = [devices, device_catalog]
jobs = [devices_job, device_catalog_job]

__all__ = ["assets", "device_catalog", "device_catalog_job", "devices", "devices_job", "jobs"]
