"""What each column of the platform's tables holds: the descriptions Dagster's column
schema shows (`dagster/column_schema`). A comment the Delta schema carries wins; these
fill in for columns without one. A column name means the same thing in every table that
has it, except where a table gives its own entry (`"table.column"`)."""

from __future__ import annotations

_RUN = "The Dagster run that wrote the row."

COLUMNS: dict[str, str] = {
    # Provenance, shared by many tables.
    "source_file": "The landing file the row was read from (relative to the landing root).",
    "source_line": "The row's line in its source file (1-based).",
    "dagster_run_id": _RUN,
    "run_id": "The run this row is about.",
    "partition_key": "The Dagster partition the row belongs to.",
    "asset_key": "The Dagster asset the row belongs to.",
    "ingested_at": "When the platform first wrote the row (UTC).",
    "updated_at": "When the row last changed (UTC).",
    "created_at": "When it was created (UTC).",
    # Visits.
    "visit_id": "The visit's id: the key a late or repeated delivery is matched on.",
    "user_id": "The user the row belongs to.",
    "event_time": "When it happened (UTC).",
    "event_date": "The UTC day of `event_time`: the daily partition.",
    "week_start": "The Monday (UTC) of the row's week: the weekly partition.",
    "page": "The page visited.",
    "context": "Optional visit context (referrer, device), as delivered.",
    "first_seen_at": "When the visit id was first seen by the platform (UTC).",
    "table_name": "The Delta table (under the lakehouse root) that holds the week.",
    "changed_at": "When this row last changed (UTC).",
    "visits_manifest.status": "`active` (readers use this table for the week) or `retired`.",
    # Transactional Writer.
    "input_digest": "SHA-256 of the partition's input files (paths and content hashes).",
    "input_version": "The number of this input of the partition: its app-transaction version.",
    "registered_at": "When this input was first numbered (UTC).",
    "input_versions.reason": "Why the input was numbered: `input` (new files), or the note of "
    "the restore that undid the partition.",
    # Devices (Merger) and the device catalog (Stateful Merger).
    "type": "The device type (with `version`, the device's key).",
    "full_name": "The device's full name.",
    "version": "The device version (with `type`, the device's key).",
    "is_deleted": "Whether the change deletes the device.",
    "id": "The catalog entry's id (its key).",
    "brand_name": "The device's brand.",
    "processor_brand": "The brand of the device's processor.",
    "execution_day": "The catalog day whose MERGE this row records.",
    "delta_version": "The Delta version of `device_catalog` that day's MERGE created.",
    "recorded_at": "When the version was recorded (UTC).",
    # Payments.
    "idempotency_key": "The key a replayed payment is recognised by.",
    "account_id": "The paying account.",
    "amount": "The amount, as a decimal.",
    "currency": "ISO 4217 currency code.",
    "payment_date": "The UTC day of the payment: the daily partition.",
    "payload_sha256": "SHA-256 of the payment's fields: a replay must match it exactly.",
    "column": "The field whose values differ between the stored and the replayed payment.",
    "stored_value": "The value stored first.",
    "incoming_value": "The value the replay carried.",
    "stored_at": "When the stored payment was written (UTC).",
    "incoming_at": "When the replay arrived (UTC).",
    "detected_at": "When the conflict was found (UTC).",
    # User sessions (Keyed Idempotency).
    "session_id": "The session's id, derived from its first visit: the same on every rebuild.",
    "session_start": "The session's first visit (UTC).",
    "session_end": "The session's last visit (UTC).",
    "visits": "Visits in the session.",
    "first_ingested_at": "When the session's first visit was first seen (UTC).",
    "first_ingested_visit": "The visit the session id derives from.",
    "session_date": "The UTC day the session starts: the partition.",
    "merged_into": "The session that absorbed this one when a late visit joined them.",
    "retired_at": "When the session was merged away (UTC).",
    "session_day": "The day of sessions this build rebuilt.",
    "day_visits": "Visits of that day the build read.",
    "seen_through": "The newest `first_seen_at` of the day the build had read (epoch µs).",
    "built_at": "When the build committed (UTC).",
    # Device snapshot (Proxy).
    "snapshot": "The snapshot table's name.",
    "source_version": "The Delta version of `devices` the snapshot was copied from.",
    "device_snapshot_manifest.rows": "Rows in the snapshot.",
    "device_snapshot_manifest.status": "`current` (what readers see), `kept` or `retired`.",
    "status_since": "When the status was set (UTC).",
    # User events (write-audit-publish).
    "event_id": "The event's id (derived from its content when the file gives none).",
    "event_timestamp": "When the event happened (UTC): the newer one wins.",
    "ingestion_time": "When the event was ingested upstream (UTC): breaks ties.",
    "payload": "The event's payload, canonical JSON.",
    "op": "`upsert` or `delete`.",
    "batch_id": "The landed batch the event came in.",
    "key_derived": "Whether `event_id` was derived from the content (the file gave none).",
    "user_events.is_deleted": "Whether the kept version deletes the event: a tombstone, so "
    "an older upsert arriving later never brings it back.",
    "user_events_staging.is_deleted": "Whether the version deletes the event (`op` delete).",
    "user_events.event_date": "The UTC day of `event_timestamp`: the daily partition.",
    "user_events_staging.event_date": "The UTC day of `event_timestamp` (the staging table "
    "is partitioned by `batch_id`).",
    "key_hash": "The event key's hash: the first 8 bytes of its SHA-256, as a signed integer.",
    "key_check": "The next 8 bytes of the key's SHA-256: with `key_hash`, 128 bits that tell "
    "keys apart.",
    "user_events_key_index.event_date": "The day (partition of `user_events`) the row is in.",
    "user_events_key_index.file": "The row's file: the first 8 bytes of the SHA-256 of its "
    "path in the table's folder, as a signed integer (null on an object store).",
    "user_events_key_index.row": "The row's position in its file, from 0: where a deletion "
    "vector marks it (null on an object store).",
    "user_events_key_index.event_timestamp": "The row's `event_timestamp`, which orders its "
    "versions first (null on an object store).",
    "user_events_key_index.tier": "0 for the entries the last rebuild wrote, 1 for those "
    "appended since.",
    "content_digest": "SHA-256 of the event's op and payload: breaks ties of time.",
    # Enriched runs (load manifest).
    "event_type": "The event's kind: it names the warehouse table the event loads into.",
    "event": "The event as delivered, one JSON object.",
    # Load manifest.
    "state": "`NEW`, `PROCESSED` (staged) or `LOADED` (in the warehouse tables).",
    "to_skip": "Set by an operator: the run is never processed or loaded.",
    "skip_reason": "Why it is skipped.",
    "added_at": "When the run directory was registered (UTC).",
    "added_by": "The Dagster run that registered it.",
    "processed_at": "When it was staged (UTC).",
    "processed_by": "The Dagster run that staged it.",
    "loaded_at": "When it was loaded (UTC).",
    "loaded_by": "The Dagster run that loaded it.",
    "event_types": "The event types found, comma-separated in name order.",
    "events": "Events staged.",
    "stage_path": "Where its staged events are, under the lakehouse root.",
    # Telemetry.
    "subject_key": "The tool (folder under telemetry/) the reports come from.",
    "ts": "The report row's time (UTC).",
    "source": "The report file (relative to the landing root).",
    "line": "The row's line in its report file.",
    "in_spec": "Parts in spec.",
    "out_of_spec": "Parts out of spec.",
    "mispicks": "Mispicks.",
    "cum_in_spec": "Running total of `in_spec` for the subject, in (ts, source, line) order.",
    "cum_out_of_spec": "Running total of `out_of_spec`, in the same order.",
    "cum_mispicks": "Running total of `mispicks`, in the same order.",
    "hour": "The UTC hour.",
    "telemetry_hourly.rows": "Report rows in the hour.",
    "telemetry_totals_hour_start.rows": "Report rows in the hour.",
    "hour_cum_in_spec": "`in_spec` summed from the start of the row's hour, in (ts, source, "
    "line) order; plus `start_in_spec` of the hour, the running total.",
    "hour_cum_out_of_spec": "`out_of_spec` summed from the start of the row's hour.",
    "hour_cum_mispicks": "`mispicks` summed from the start of the row's hour.",
    "start_in_spec": "The subject's `in_spec` total over every row before the hour.",
    "start_out_of_spec": "The subject's `out_of_spec` total over every row before the hour.",
    "start_mispicks": "The subject's `mispicks` total over every row before the hour.",
    "content_hash": "SHA-256 of the whole file as last seen.",
    "size": "The file's size in bytes as last seen.",
    "mtime_ns": "The file's modification time (ns) as last seen.",
    "ingested_bytes": "How much of the file (complete lines) is in telemetry_raw.",
    "ingested_hash": "SHA-256 of that ingested prefix: an append is told from a rewrite.",
    "telemetry_file_state.rows": "Rows of the file in telemetry_raw.",
    "telemetry_file_state.status": (
        "`ingested`, `waiting`, `retrying`, `failed`, `quarantined` or `blacklisted`."
    ),
    "attempts": "Failed attempts so far.",
    "last_error": "The last failure, naming file and line.",
    "next_attempt_at": "When a retrying file is tried again (UTC).",
    "last_seen": "When the file was last looked at (UTC).",
    "logical_start": "The file's earliest row time (UTC).",
    "logical_end": "The file's latest row time (UTC).",
    "dirty_start": "Earliest row time whose running totals still need recomputing.",
    "dirty_end": "Latest row time whose running totals still need recomputing.",
    "raw_version": "The Delta version of telemetry_raw that holds the file's rows.",
    "process_count": "How many times the file was ingested.",
    "reingest_requested": "An operator asked for the file to be ingested again.",
    "action": "What was decided about the file (ingested, retried, failed, quarantined, ...).",
    "detail": "Why, with the file and line where one is at fault.",
    "rows_written": "Rows the action wrote.",
    "reason": "Why, as the operator or the platform gave it.",
    "requested_at": "When it was asked for (UTC).",
    "quarantined_at": "When the file was set aside (UTC).",
    "data_end": "The file's latest row time.",
    "subject_newest": "The subject's newest row time when the file arrived.",
    "released_at": "When an operator released the file (UTC).",
    "released_by_run": "The Dagster run that released it.",
    # Sensors.
    "sensor": "The sensor that remembers the file.",
    "path": "The file, relative to the landing root.",
    "sha256": "SHA-256 of the file's content when last hashed.",
    "sensor_files.seq": "The sensor's write that recorded the row (a sequence per sensor): "
    "of a path's rows, the latest wins.",
    "sensor_files.removed": "Whether the file was gone from the landing zone when the row "
    "was written.",
    "label": "What the sensor worked out from the content once (e.g. the telemetry subject).",
    "etag": "The object's entity tag as last listed, in an object-store landing zone (null "
    "on a local disk).",
}


def column_description(table: str, column: str) -> str | None:
    """The description of `column` in `table` (a table per week or snapshot counts as its
    family: `visits_weekly/week=...`)."""
    family = table.split("/", 1)[0]
    return COLUMNS.get(f"{family}.{column}") or COLUMNS.get(column)
