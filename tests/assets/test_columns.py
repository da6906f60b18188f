"""Every column the platform writes has a description for Dagster's column schema."""

from __future__ import annotations

import importlib
import pkgutil

import pyarrow as pa

import assets
import sensors
from assets.columns import COLUMNS, column_description


def written_columns() -> dict[str, set[str]]:
    """Column names of every Arrow schema and column list the asset and sensor modules
    declare, by module."""
    found: dict[str, set[str]] = {}
    modules = [
        *pkgutil.walk_packages(assets.__path__, "assets."),
        *pkgutil.walk_packages(sensors.__path__, "sensors."),
    ]
    for module_info in modules:
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            if isinstance(value, pa.Schema):
                found.setdefault(module_info.name, set()).update(value.names)
            elif name.endswith("_COLUMNS") and isinstance(value, tuple):
                # A leading underscore: Delta's change-feed columns, read, never written.
                names = {v for v in value if isinstance(v, str) and " " not in v and v[:1] != "_"}
                found.setdefault(module_info.name, set()).update(names)
    return found


def test_every_declared_column_has_a_description():
    described = {key.rsplit(".", 1)[-1] for key in COLUMNS}
    missing = {
        module: sorted(names - described)
        for module, names in written_columns().items()
        if names - described
    }
    assert not missing, missing


def test_a_tables_own_entry_wins_and_week_tables_count_as_their_family():
    assert column_description("telemetry_hourly", "rows") == COLUMNS["telemetry_hourly.rows"]
    assert column_description("visits_weekly/week=2024-12-02", "visit_id") == COLUMNS["visit_id"]
    assert column_description("visits_manifest", "status") == COLUMNS["visits_manifest.status"]
