"""Keyed Idempotency: `user_sessions`, sessions per user whose ids never change.

A session is a user's run of visits with no inactivity gap longer than `gap_minutes` of
event time. Its id is a SHA-256 of the user and the session's first-*ingested* visit
(its `first_seen_at` from `visit_first_seen`, then its visit id, which orders visits
ingested in one batch): a visit arriving late, even one earlier in event time than the
session's first, was ingested later, so it joins the session without changing its id.
When a late visit bridges two sessions, the merged session keeps the id of the
earliest-ingested one by the same rule, and the other id is retired: recorded in
`user_sessions_retired` (`merged_into`, when, which run) and deleted from
`user_sessions`, which holds live sessions only. A retired id never comes back: when a
visit is removed and a session splits off again, it takes a new id derived from the
retired one.

A run rebuilds only what changed of its days: the users with visits of a day first seen
since the day was last built (`user_sessions_builds` logs each build of a day with its
visit count and latest first-seen time; every user of the day when the day is new or
lost visits), and of those only the sessions within the run's days widened by the gap
and by the stored sessions they reach, widened again until no rebuilt session touches
the window's edge (so a session that runs across days, or days processed out of order,
are rebuilt whole). One MERGE on `session_id`, pinned to the window's session dates,
upserts the changed sessions and deletes the retired ones in one commit; a run whose
days did not change commits nothing. A backfilled range is one such rebuild: one Spark
pass and one commit for all its days, which each get a materialization pointing at it.
"""

import datetime as dt
from typing import Any

import dagster as dg

from assets.automation import after_upstream
from assets.catalog import RESTORE_WHOLE_TABLE, declared
from assets.database.user_sessions.changes import changed_users
from assets.database.user_sessions.inputs import InputVersions
from assets.database.user_sessions.publish import publish
from assets.database.user_sessions.rebuild import rebuild
from assets.database.user_sessions.tables import USER_SESSIONS
from assets.materialization import commit_metadata, materialization_metadata, skipped_metadata
from assets.overwriting.data_overwrite import daily_partitions, visits_daily
from assets.partition_range import SINGLE_RUN, parse_day, run_span
from resources import Lakehouse


class SessionSettings(dg.ConfigurableResource):
    gap_minutes: int = 30
    """A visit more than this many minutes (event time) after the previous one of its
    user starts a new session."""


def build(
    context: dg.AssetExecutionContext, lakehouse: Lakehouse, gap: dt.timedelta
) -> dict[str, dict[str, Any]]:
    """Rebuild what changed of the run's days and publish it in one commit: each day's
    metadata. The days that changed share the commit's; the others are skipped."""
    keys = context.partition_keys
    span = run_span(keys)
    days = [parse_day(key) for key in keys]
    inputs = InputVersions.current(lakehouse)
    changes = changed_users(lakehouse, days, inputs)
    changed = {mark.day for mark in changes.marks}
    committed: dict[str, Any] = {}
    if changed:
        rebuilt = rebuild(lakehouse, changes, gap, inputs)
        result, retired = publish(
            lakehouse,
            rebuilt,
            run_id=context.run.run_id,
            partition_key=span,
            metadata=commit_metadata(context, partition_key=span),
        )
        committed = materialization_metadata(
            lakehouse,
            result,
            partition_key=span,
            extra={
                "days_rebuilt": dg.MetadataValue.int(len(changed)),
                "sessions_rebuilt": dg.MetadataValue.int(rebuilt.sessions.count()),
                "sessions_retired": dg.MetadataValue.int(retired),
                "window": f"{rebuilt.window.start:%Y-%m-%d %H:%M} .. "
                f"{rebuilt.window.end:%Y-%m-%d %H:%M} UTC",
                "widenings": dg.MetadataValue.int(rebuilt.widenings),
                "users_rebuilt": str(changes.users),
                **inputs.metadata(),
            },
        )
    unchanged: dict[str, Any] = {}
    if len(changed) < len(days):
        unchanged = skipped_metadata(
            lakehouse,
            USER_SESSIONS,
            reason="no visit of the day changed since its sessions were built",
            partition_key=span,
            extra=inputs.metadata(),
        )
    return {
        key: committed if day in changed else unchanged for key, day in zip(keys, days, strict=True)
    }


@dg.asset(
    partitions_def=daily_partitions,
    deps=[visits_daily],
    backfill_policy=SINGLE_RUN,
    automation_condition=after_upstream(),
    group_name="database",
    kinds={"spark", "delta"},
    **declared(
        "keyed-idempotency",
        restore=RESTORE_WHOLE_TABLE,
        writes=["user_sessions_retired", "user_sessions_builds"],
    ),
)
def user_sessions(
    context: dg.AssetExecutionContext, lakehouse: Lakehouse, session_settings: SessionSettings
) -> dg.MaterializeResult:
    """Sessions per user (a new one after `gap_minutes` of inactivity) with ids that
    never change across reruns, backfills and late visits: SHA-256 of the user and the
    session's first-ingested visit. Sessions merged by a late visit keep the
    earliest-ingested id; the others are listed in `user_sessions_retired`. A backfilled
    range is one run and one rebuild of what changed in its days: one Spark pass, one
    commit, and a materialization of each day pointing at it."""
    gap = dt.timedelta(minutes=session_settings.gap_minutes)
    for key, metadata in build(context, lakehouse, gap).items():
        context.add_asset_metadata(metadata, partition_key=key)
    return dg.MaterializeResult()


user_sessions_job = dg.define_asset_job(
    "user_sessions_job",
    selection=[user_sessions],
    description="Build days of user_sessions from visits_daily (session ids never change).",
)
