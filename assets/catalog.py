"""What the catalog shows of every asset: the owner, the pattern it implements (a tag,
and a line of its description), how to restore it, the landing folders it reads, and a
link to its source. Each asset declares its own (`declared`, in its `@dg.asset`); the
definitions apply them to all assets at once (`with_catalog_policy`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, cast

import dagster as dg

from assets.external import CONTROL, LANDING, OWNER, WRITES, landing_key
from resources.catalog import SCHEMA, catalog_name

# How restore_table treats an asset's partitions (see assets/maintenance.py); `{key}` is
# the asset's key.
RESTORE_SLICE = (
    "restore_table with `undo_materialization: {{asset_key: {key}, partition: <key>}}` "
    "moves that partition alone, back to before its latest materialization."
)
RESTORE_OWN_TABLE = (
    "each partition is its own table: restore_table with `undo_materialization: "
    "{{asset_key: {key}, partition: <key>}}` moves that table alone."
)
RESTORE_WHOLE_TABLE = (
    "restore_table with `undo_materialization: {{asset_key: {key}, partition: <key>}}` (or "
    "`table_version`) moves the whole table; every partition it moved is reported and "
    "marked `needs_rerun`."
)
RESTORE_OPERATOR_JOBS = (
    "use its operator jobs (blacklist_telemetry_file, reingest_telemetry_file, "
    "release_quarantined_file); the subject's next run repairs the derived tables."
)
RESTORE_REPLAY = "re-run its partition: the load manifest replaces what the run wrote."
RESTORE_PROXY = "point_device_snapshot points the proxy back at an earlier snapshot."

_RESTORE = "restore"
_READS = "landing_folders"
RELATIONS = "relations"
"""Definition metadata keys of the declaration, shown on the asset's page."""


def declared(
    pattern: str,
    *,
    restore: str,
    reads: Sequence[str] = (),
    writes: Sequence[str] = (),
    relations: Sequence[str] = (),
) -> dict[str, Any]:
    """What an asset declares of itself for the catalog, spread into its `@dg.asset`
    (`**declared(...)`): the pattern it implements, how to restore it (one of the
    RESTORE_* notes), the landing folders it reads, the control tables it writes (see
    `assets.external`: LANDING, CONTROL), and the lakehouse tables or views readers
    query it by (default: one named as the asset)."""
    for kind, names, known in (
        ("landing folder", reads, LANDING),
        ("control table", writes, CONTROL),
    ):
        unknown = sorted(set(names) - set(known))
        if unknown:
            raise ValueError(f"no {kind} {', '.join(unknown)} (see assets/external.py)")
    return {
        "tags": {"pattern": pattern},
        "metadata": {
            _RESTORE: restore,
            _READS: list(reads),
            WRITES: list(writes),
            RELATIONS: list(relations),
        },
    }


def _with_policy(spec: dg.AssetSpec) -> dg.AssetSpec:
    key = spec.key.to_user_string()
    if _RESTORE not in spec.metadata:
        raise ValueError(f"asset {key} declares no pattern: give its @dg.asset **declared(...)")
    restore = str(spec.metadata[_RESTORE]).format(key=key)
    description = (
        f"{spec.description or ''}\n\nPattern: {spec.tags['pattern']}. Restore: {restore}"
    ).strip()
    relations = [catalog_name(r) for r in spec.metadata[RELATIONS] or [spec.key.path[-1]]]
    shown = {_RESTORE: restore, RELATIONS: [f"{SCHEMA}.{name}" for name in relations]}
    return spec.replace_attributes(
        description=description, metadata={**spec.metadata, **shown}
    ).merge_attributes(
        owners=[OWNER], deps=[landing_key(folder) for folder in spec.metadata[_READS]]
    )


def with_catalog_policy(assets: Sequence[dg.AssetsDefinition]) -> list[dg.AssetsDefinition]:
    """Every asset with its owner, pattern tag, restore note and a link to its source."""
    with warnings.catch_warnings():
        # Code references are beta in this Dagster: a notice per asset on every load of the
        # definitions, in the output of every `dagster asset materialize`.
        warnings.simplefilter("ignore", dg.BetaWarning)
        mapped = dg.with_source_code_references(dg.map_asset_specs(_with_policy, assets))
        return cast(list[dg.AssetsDefinition], list(mapped))  # assets in, assets out
