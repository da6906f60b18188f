"""What the platform reads and keeps besides its assets' own tables, declared so that the
catalog and the lineage show all of it: the landing zone's folders (source assets each
asset depends on) and the control tables (written by the assets named, as part of their
own materialization; they are never materialized alone).
"""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg

OWNER = "team:data-platform"

# Landing folder -> what lands there (each asset declares the folders it reads).
LANDING: dict[str, str] = {
    "visits": "visits/date=YYYY-MM-DD/*.jsonl, one visit per line.",
    "devices_cdc": "devices_cdc/YYYY-MM-DD.csv, a day of device changes.",
    "device_catalog": "device_catalog/YYYY-MM-DD.jsonl, a day of catalog changes.",
    "payments": "payments/date=YYYY-MM-DD/*.jsonl, one payment per line.",
    "telemetry": "telemetry/<subject>/*.csv, report files of tools.",
    "events": "events/<batch id>.jsonl, one event batch a file.",
    "enriched": "enriched/run=YYYY-MM-DD-HH-MM-SS/, an upstream run directory, done at _SUCCESS.",
}

# Control table -> what it holds (each asset declares the control tables it writes).
CONTROL: dict[str, str] = {
    "visits_manifest": (
        "Which table holds each week (weekly or frozen yearly): the visits exposition."
    ),
    "visit_first_seen": "When each visit was first seen.",
    "input_versions": (
        "Transactional Writer: each partition's inputs, numbered, for its app transactions "
        "(partitioned by asset)."
    ),
    "device_catalog_versions": (
        "The Delta version each day's MERGE created: what a backfill restores to."
    ),
    "device_snapshot_manifest": "Proxy: every snapshot, and which one readers see.",
    "payments_conflicts": "Idempotency keys replayed with another payment, with both versions.",
    "user_sessions_retired": "Session ids merged into another session.",
    "user_sessions_builds": "One row per build of a day of sessions.",
    "telemetry_file_state": (
        "Per report file: hash, size, ingested bytes, rows, status, attempts, last error."
    ),
    "telemetry_ingest_events": "Every ingest, retry, failure and decision.",
    "telemetry_blacklist": "Files an operator blacklisted.",
    "telemetry_quarantine": "Files set aside as too late.",
    "user_events_key_index": (
        "Record-level index: (key_hash, event_date) pairs naming the days that may hold each "
        "event key's row in user_events; key_hash is the first 8 bytes of the key's SHA-256."
    ),
    "load_manifest": (
        "One row per enriched run: NEW -> PROCESSED -> LOADED, skips and who moved it."
    ),
}
WRITES = "control_tables"
"""Definition metadata key of the control tables an asset declares it writes."""


# The file sensors' own control table: what they remember of each landed file.
SENSOR_STATE = "sensor_files"
SENSOR_STATE_READS = ("visits", "devices_cdc", "device_catalog", "telemetry", "events")


def landing_key(folder: str) -> dg.AssetKey:
    return dg.AssetKey(["landing", folder])


def external_specs(assets: Sequence[dg.AssetsDefinition]) -> list[dg.AssetSpec]:
    """The landing folders and control tables, each control table downstream of the
    `assets` that declare they write it."""
    writers: dict[str, list[dg.AssetKey]] = {table: [] for table in CONTROL}
    for spec in (spec for asset in assets for spec in asset.specs):
        for table in spec.metadata.get(WRITES, []):
            writers[table].append(spec.key)
    unwritten = [table for table, keys in writers.items() if not keys]
    if unwritten:
        raise ValueError(
            f"no asset declares it writes {', '.join(unwritten)}: name it in the writer's "
            "**declared(..., writes=[...])"
        )
    landing = [
        dg.AssetSpec(
            landing_key(folder),
            group_name="landing",
            kinds={"file"},
            owners=[OWNER],
            tags={"pattern": "landing-zone"},
            description=f"Landing zone: {text} Read, never written, by the platform.",
        )
        for folder, text in LANDING.items()
    ]
    control = [
        _control_spec(
            table,
            writers[table],
            f"{text} Written by {', '.join(key.to_user_string() for key in writers[table])} "
            "in their own runs; restore it with them.",
        )
        for table, text in CONTROL.items()
    ]
    sensor_state = _control_spec(
        SENSOR_STATE,
        [landing_key(folder) for folder in SENSOR_STATE_READS],
        "Per file sensor and landed file, its size, mtime and content hash (and subject), so "
        "a file is hashed again only when it moved: each tick appends the files that "
        "changed (the latest row of a file wins), and a sensor's rows are rewritten as one "
        "per file after every 100 appends. Written by the sensors visits_late_files, change_files, "
        "event_batch_files and telemetry_files, whose cursors hold only this table's "
        "version. Deleting a sensor's rows (or resetting its cursor) makes it hash every "
        "file once again; run keys keep that from launching work twice.",
    )
    return [*landing, *control, sensor_state]


def _control_spec(table: str, deps: list[dg.AssetKey], text: str) -> dg.AssetSpec:
    return dg.AssetSpec(
        dg.AssetKey(["control", table]),
        deps=deps,
        group_name="control",
        kinds={"delta"},
        owners=[OWNER],
        tags={"pattern": "control-table"},
        metadata={"dagster/table_name": table},
        description=f"Control table `{table}`: {text}",
    )
