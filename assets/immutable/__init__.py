"""Immutable dataset patterns: the Proxy (`device_snapshot`)."""

from assets.immutable.device_snapshot import (
    device_snapshot,
    device_snapshot_job,
    point_device_snapshot,
)

__all__ = ["device_snapshot", "device_snapshot_job", "point_device_snapshot"]
