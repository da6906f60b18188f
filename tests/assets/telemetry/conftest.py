"""Telemetry fixtures: a deployment (tests/telemetry_deployment.py) per test."""

from __future__ import annotations

import pytest
from telemetry_deployment import Deployment

from assets.telemetry import TelemetrySettings


@pytest.fixture
def settings() -> TelemetrySettings:
    return TelemetrySettings()


@pytest.fixture
def deployment(instance, lakehouse, landing, settings) -> Deployment:
    return Deployment(instance, lakehouse, landing, settings)
