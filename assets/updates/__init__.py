"""Updates patterns: Merger (`devices`) and Stateful Merger (`device_catalog`)."""

from assets.updates.merger import devices
from assets.updates.stateful_merger import device_catalog

assets = [devices, device_catalog]

__all__ = ["assets", "device_catalog", "devices"]
