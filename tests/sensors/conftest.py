"""Sensor fixtures."""

from __future__ import annotations

import pytest

from sensors import file_state, listing, telemetry_decision


@pytest.fixture
def restart():
    """What a new code server process starts from: no listing, no state and no decision
    in memory (the sensors' states are read from the tables, every file is listed once)."""

    def forget() -> None:
        for found in listing._LISTINGS.values():
            found.close()
        listing._LISTINGS.clear()
        file_state._REMEMBERED.clear()
        telemetry_decision._KEPT.clear()

    forget()
    yield forget
    forget()
