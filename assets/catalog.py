"""What the catalog shows of every asset, applied once for all of them: the owner, the
pattern it implements (a tag, and a line of its description), how to restore it, and a
link to its source.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import dagster as dg

from assets.external import OWNER, landing_deps

# How restore_table treats an asset's partitions (see assets/maintenance.py).
_SLICE = (
    "restore_table with `undo_materialization: {{asset_key: {key}, partition: <key>}}` "
    "moves that partition alone, back to before its latest materialization."
)
_OWN_TABLE = (
    "each partition is its own table: restore_table with `undo_materialization: "
    "{{asset_key: {key}, partition: <key>}}` moves that table alone."
)
_WHOLE_TABLE = (
    "restore_table with `undo_materialization: {{asset_key: {key}, partition: <key>}}` (or "
    "`table_version`) moves the whole table; every partition it moved is reported and "
    "marked `needs_rerun`."
)
_OPERATOR_JOBS = (
    "use its operator jobs (blacklist_telemetry_file, reingest_telemetry_file, "
    "release_quarantined_file); the subject's next run repairs the derived tables."
)
_REPLAY = "re-run its partition: the load manifest replaces what the run wrote."
_PROXY = "point_device_snapshot points the proxy back at an earlier snapshot."

PATTERNS: dict[str, tuple[str, str]] = {
    "visits_daily": ("data-overwrite", _SLICE),
    "visits_weekly": ("fast-metadata-cleaner", _OWN_TABLE),
    "devices": ("merger", _WHOLE_TABLE),
    "device_catalog": ("stateful-merger", _WHOLE_TABLE),
    "device_snapshot": ("proxy", _PROXY),
    "payments": ("idempotent-insert", _WHOLE_TABLE),
    "user_sessions": ("keyed-idempotency", _WHOLE_TABLE),
    "telemetry_raw": ("out-of-order-telemetry", _OPERATOR_JOBS),
    "telemetry_running_totals": ("out-of-order-telemetry", _OPERATOR_JOBS),
    "telemetry_hourly": ("out-of-order-telemetry", _OPERATOR_JOBS),
    "user_events_staging": ("write-audit-publish", _WHOLE_TABLE),
    "user_events": ("newer-wins-merge", _WHOLE_TABLE),
    "shredded_events": ("load-manifest", _REPLAY),
    "warehouse_events": ("load-manifest", _REPLAY),
}


def _with_policy(spec: dg.AssetSpec) -> dg.AssetSpec:
    key = spec.key.to_user_string()
    pattern, restore = PATTERNS[key]
    description = (
        f"{spec.description or ''}\n\nPattern: {pattern}. Restore: {restore.format(key=key)}"
    ).strip()
    return spec.replace_attributes(description=description).merge_attributes(
        owners=[OWNER], tags={"pattern": pattern}, deps=landing_deps(key)
    )


def with_catalog_policy(assets: Sequence[dg.AssetsDefinition]) -> list[dg.AssetsDefinition]:
    """Every asset with its owner, pattern tag, restore note and a link to its source."""
    with warnings.catch_warnings():
        # Code references are beta in this Dagster: a notice per asset on every load of the
        # definitions, in the output of every `dagster asset materialize`.
        warnings.simplefilter("ignore", dg.BetaWarning)
        return list(dg.with_source_code_references(dg.map_asset_specs(_with_policy, assets)))
