"""Immutable dataset patterns: the Proxy (`device_snapshot`)."""

from assets.immutable.device_snapshot import device_snapshot, point_device_snapshot
from assets.jobs import asset_job

device_snapshot_job = asset_job(
    device_snapshot,
    "Write a new write-once snapshot of device_catalog and point readers at it.",
)

assets = [device_snapshot]
jobs = [device_snapshot_job, point_device_snapshot]

__all__ = ["assets", "device_snapshot", "device_snapshot_job", "jobs", "point_device_snapshot"]
