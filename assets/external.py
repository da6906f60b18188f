"""What the platform reads and keeps besides its assets' own tables, declared so that the
catalog and the lineage show all of it: the landing zone's folders (source assets each
asset depends on) and the control tables (written by the assets named, as part of their
own materialization; they are never materialized alone).
"""

from __future__ import annotations

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

# Control table -> (the assets that write it, what it holds).
CONTROL: dict[str, tuple[tuple[str, ...], str]] = {
    "visits_manifest": (
        ("visits_weekly",),
        "Which table holds each week (weekly or frozen yearly): the visits exposition.",
    ),
    "visit_first_seen": (("visits_daily",), "When each visit was first seen."),
    "input_versions": (
        ("visits_daily", "devices"),
        "Transactional Writer: each partition's inputs, numbered, for its app transactions.",
    ),
    "device_catalog_versions": (
        ("device_catalog",),
        "The Delta version each day's MERGE created: what a backfill restores to.",
    ),
    "device_snapshot_manifest": (
        ("device_snapshot",),
        "Proxy: every snapshot, and which one readers see.",
    ),
    "payments_conflicts": (
        ("payments",),
        "Idempotency keys replayed with another payment, with both versions.",
    ),
    "user_sessions_retired": (("user_sessions",), "Session ids merged into another session."),
    "user_sessions_builds": (("user_sessions",), "One row per build of a day of sessions."),
    "telemetry_file_state": (
        ("telemetry_raw",),
        "Per report file: hash, size, ingested bytes, rows, status, attempts, last error.",
    ),
    "telemetry_ingest_events": (("telemetry_raw",), "Every ingest, retry, failure and decision."),
    "telemetry_blacklist": (("telemetry_raw",), "Files an operator blacklisted."),
    "telemetry_quarantine": (("telemetry_raw",), "Files set aside as too late."),
    "load_manifest": (
        ("shredded_events", "warehouse_events"),
        "One row per enriched run: NEW -> PROCESSED -> LOADED, skips and who moved it.",
    ),
}


# The file sensors' own control table: what they remember of each landed file.
SENSOR_STATE = "sensor_file_state"
SENSOR_STATE_READS = ("visits", "devices_cdc", "device_catalog", "telemetry", "events")


def landing_key(folder: str) -> dg.AssetKey:
    return dg.AssetKey(["landing", folder])


def external_specs() -> list[dg.AssetSpec]:
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
            [dg.AssetKey(w) for w in writers],
            f"{text} Written by {', '.join(writers)} in their own runs; restore it with them.",
        )
        for table, (writers, text) in CONTROL.items()
    ]
    sensor_state = _control_spec(
        SENSOR_STATE,
        [landing_key(folder) for folder in SENSOR_STATE_READS],
        "Per file sensor and landed file, its size, mtime and content hash (and subject), so "
        "a file is hashed again only when it moved. Written by the sensors "
        "visits_late_files, change_files, event_batch_files and telemetry_files, whose "
        "cursors hold only this table's version. Deleting a sensor's rows (or resetting its "
        "cursor) makes it hash every file once again; run keys keep that from launching "
        "work twice.",
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
