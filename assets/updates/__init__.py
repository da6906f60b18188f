"""Updates patterns: Merger (`devices`) and Stateful Merger (`device_catalog`)."""

from assets.run_policy import IN_ORDER
from assets.updates.merger import devices, devices_job
from assets.updates.stateful_merger import device_catalog, device_catalog_job

__all__ = [
    "IN_ORDER",
    "device_catalog",
    "device_catalog_job",
    "devices",
    "devices_job",
]
