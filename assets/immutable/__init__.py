"""Immutable dataset patterns: the Proxy (`device_snapshot`)."""

from assets.immutable.device_snapshot import device_snapshot, point_device_snapshot

assets = [device_snapshot]
jobs = [point_device_snapshot]

__all__ = ["assets", "device_snapshot", "jobs", "point_device_snapshot"]
