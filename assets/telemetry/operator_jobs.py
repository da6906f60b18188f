"""Operator jobs for telemetry files, launched from the Dagster launchpad with config.

Each records the operator's decision in a control table and in the ingest event log;
the subject's next run (which the sensor requests at once) carries it out under the
subject's lock: blacklisted rows leave the raw table, a re-ingested file replaces all
its rows, a released file is applied, and the totals and rollups are repaired.
"""

import datetime as dt

import dagster as dg
import pyarrow as pa
from pydantic import Field

from assets.materialization import commit_metadata
from assets.run_policy import NO_RETRY_ON_REFUSAL
from assets.telemetry import control
from assets.telemetry.control import Event
from resources import Lakehouse
from resources.lakehouse import WhenMatchedUpdate, WhenNotMatchedInsert
from resources.lakehouse.predicates import Constant, from_source, matches


class OperatorRequestError(ValueError):
    """The request names no file the platform knows."""


class TelemetryFileConfig(dg.Config):
    source: str = Field(
        description="The file's path in the landing zone, e.g. "
        "`telemetry/Tool07/2024-05-01T04.csv` (as shown in the asset's metadata and in "
        "telemetry_file_state)."
    )
    reason: str = Field(default="", description="Why, recorded in the ingest event log.")


def _known_state(lakehouse: Lakehouse, source: str) -> control.FileState:
    states = (
        control.file_states_of_sources(lakehouse, [source])
        if lakehouse.exists(control.FILE_STATE)
        else {}
    )
    if source not in states:
        raise OperatorRequestError(
            f"no telemetry file {source!r} is known (see telemetry_file_state for the files "
            "the platform has seen; paths are relative to the landing root)"
        )
    return states[source]


def _record(
    context: dg.OpExecutionContext,
    lakehouse: Lakehouse,
    state: control.FileState,
    action: str,
    detail: str,
) -> None:
    now = dt.datetime.now(dt.UTC)
    control.ensure_table(lakehouse, control.EVENTS, commit_metadata(context, partition_key=None))
    control.log_events(
        lakehouse,
        [
            Event(
                now,
                context.run.run_id,
                state.subject_key,
                state.source,
                action,
                state.content_hash,
                detail=detail,
            )
        ],
        commit_metadata(context, partition_key=state.subject_key),
    )
    context.log.info(
        f"{action}: {state.source} (subject {state.subject_key!r}); the subject's next run, "
        "which the telemetry sensor requests, carries it out"
    )


@dg.op
def blacklist_file(
    context: dg.OpExecutionContext, config: TelemetryFileConfig, lakehouse: Lakehouse
) -> None:
    state = _known_state(lakehouse, config.source)
    metadata = commit_metadata(context, partition_key=state.subject_key, source=config.source)
    control.ensure_table(lakehouse, control.BLACKLIST, metadata)
    entry = pa.Table.from_pylist(
        [
            {
                "source": state.source,
                "subject_key": state.subject_key,
                "reason": config.reason or "blacklisted by an operator",
                "requested_at": dt.datetime.now(dt.UTC),
                "dagster_run_id": context.run.run_id,
            }
        ],
        schema=control.BLACKLIST_SCHEMA,
    )
    lakehouse.merge(
        control.BLACKLIST,
        entry,
        on=matches("source"),
        clauses=[WhenNotMatchedInsert()],
        metadata=metadata,
    )
    _record(context, lakehouse, state, "blacklist_requested", config.reason)


@dg.op
def request_reingest(
    context: dg.OpExecutionContext, config: TelemetryFileConfig, lakehouse: Lakehouse
) -> None:
    state = _known_state(lakehouse, config.source)
    flag = pa.table({"source": [state.source]})
    lakehouse.merge(
        control.FILE_STATE,
        flag,
        on=matches("source"),
        clauses=[WhenMatchedUpdate(set={"reingest_requested": Constant(True)})],
        metadata=commit_metadata(context, partition_key=state.subject_key, source=config.source),
    )
    _record(context, lakehouse, state, "reingest_requested", config.reason)


@dg.op
def release_quarantined(
    context: dg.OpExecutionContext, config: TelemetryFileConfig, lakehouse: Lakehouse
) -> None:
    state = _known_state(lakehouse, config.source)
    held = [
        q
        for q in control.open_quarantine(control.quarantine_entries(lakehouse, state.subject_key))
        if q.source == config.source
    ]
    if not held:
        raise OperatorRequestError(f"telemetry file {config.source!r} is not in quarantine")
    released = pa.table(
        {
            "source": [q.source for q in held],
            "content_hash": [q.content_hash for q in held],
            "released_at": pa.array([dt.datetime.now(dt.UTC)] * len(held), control.UTC_TS),
            "released_by_run": [context.run.run_id] * len(held),
        }
    )
    lakehouse.merge(
        control.QUARANTINE,
        released,
        on=matches("source", "content_hash"),
        clauses=[WhenMatchedUpdate(set=from_source(("released_at", "released_by_run")))],
        metadata=commit_metadata(context, partition_key=state.subject_key, source=config.source),
    )
    _record(context, lakehouse, state, "released", config.reason)


@dg.job(
    tags=NO_RETRY_ON_REFUSAL,
    description="Blacklist a telemetry file: its rows leave the raw table, totals are repaired.",
)
def blacklist_telemetry_file() -> None:
    blacklist_file()


@dg.job(
    tags=NO_RETRY_ON_REFUSAL,
    description="Force a telemetry file to be ingested again from its first line.",
)
def reingest_telemetry_file() -> None:
    request_reingest()


@dg.job(
    tags=NO_RETRY_ON_REFUSAL,
    description="Release a quarantined telemetry file: it is applied despite its lateness.",
)
def release_quarantined_file() -> None:
    release_quarantined()
