"""Immutable dataset patterns: the Proxy (`device_snapshot`)."""

from assets.immutable.device_snapshot import (
    device_snapshot,
    device_snapshot_job,
    point_device_snapshot,
)

assets = [device_snapshot]
jobs = [device_snapshot_job, point_device_snapshot]

__all__ = ["assets", "device_snapshot", "device_snapshot_job", "jobs", "point_device_snapshot"]
