"""Immutable dataset patterns: the Proxy (`device_snapshot`)."""

import dagster as dg

from assets.immutable.device_snapshot import device_snapshot, point_device_snapshot

device_snapshot_job = dg.define_asset_job(
    "device_snapshot_job",
    selection=[device_snapshot],
    description="Write a new write-once snapshot of device_catalog and point readers at it.",
)

assets = [device_snapshot]
jobs = [device_snapshot_job, point_device_snapshot]

__all__ = ["assets", "device_snapshot", "device_snapshot_job", "jobs", "point_device_snapshot"]
