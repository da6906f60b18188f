"""Freezing: fold old weekly tables into yearly tables and retire the weekly ones.

Each week stays a partition (`week_start`) of its yearly table, so a late file for a
frozen week still replaces exactly that week in one commit. The exposition's content is
identical before and after: the job verifies row counts before it swaps the manifest.
"""

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import dagster as dg
from pydantic import Field

from assets.materialization import commit_metadata
from assets.overwriting.calendar import iso_year, week_start
from assets.overwriting.exposition import (
    VISITS_MANIFEST,
    ManifestEntry,
    expose_visits,
    manifest_entries,
    upsert_manifest,
    weekly_table,
    yearly_table,
)
from assets.run_policy import NO_RETRY_ON_REFUSAL
from resources import Lakehouse
from resources.lakehouse.predicates import eq, is_in


class FreezeConfig(dg.Config):
    older_than_weeks: int = Field(
        default=26,
        description="Weeks that ended more than this many weeks before as_of are folded.",
    )
    as_of: str = Field(
        default="", description="ISO date the age is measured from; empty means today (UTC)."
    )
    retire_grace_hours: float = Field(
        default=24.0,
        description="Retired weekly tables stay on storage this long, for readers that "
        "resolved the manifest before the swap.",
    )


def weeks_to_freeze(
    entries: Iterable[ManifestEntry], *, cutoff: dt.date
) -> dict[int, list[dt.date]]:
    """Exposed weekly tables whose whole week lies before `cutoff`, by ISO year."""
    plan: dict[int, list[dt.date]] = defaultdict(list)
    for entry in entries:
        if (
            entry.status == "active"
            and entry.table_name == weekly_table(entry.week_start)
            and entry.week_start + dt.timedelta(days=7) <= cutoff
        ):
            plan[iso_year(entry.week_start)].append(entry.week_start)
    return {year: sorted(weeks) for year, weeks in sorted(plan.items())}


def retired_tables_to_purge(
    entries: Iterable[ManifestEntry], *, older_than: dt.datetime
) -> list[str]:
    entries = list(entries)
    active = {e.table_name for e in entries if e.status == "active"}
    return sorted(
        {
            e.table_name
            for e in entries
            if e.status == "retired" and e.changed_at <= older_than and e.table_name not in active
        }
    )


class FreezeVerificationError(RuntimeError):
    """The yearly table does not hold exactly the rows of the weeks folded into it."""


@dg.op
def freeze_old_weeks(
    context: dg.OpExecutionContext,
    config: FreezeConfig,
    lakehouse: Lakehouse,
) -> dg.Output[None]:
    """Fold weekly visits tables older than the configured age into yearly tables."""
    today = dt.date.fromisoformat(config.as_of) if config.as_of else dt.datetime.now(dt.UTC).date()
    cutoff = week_start(today) - dt.timedelta(weeks=config.older_than_weeks)
    plan = weeks_to_freeze(manifest_entries(lakehouse), cutoff=cutoff)
    now = dt.datetime.now(dt.UTC)
    metadata = commit_metadata(context, partition_key=None, operation="freeze")
    copied: dict[dt.date, int | None] = {}
    swaps: list[ManifestEntry] = []
    for year, weeks in plan.items():
        target = yearly_table(year)
        frames = []
        for monday in weeks:
            copied[monday] = lakehouse.version(weekly_table(monday))
            frames.append(lakehouse.read(weekly_table(monday), version=copied[monday]))
        folded = frames[0]
        for frame in frames[1:]:
            folded = folded.unionByName(frame)
        expected = folded.count()
        lakehouse.overwrite(
            target,
            folded,
            where=is_in("week_start", weeks),
            partition_by=["week_start"],
            metadata=metadata,
        )
        held = lakehouse.read(target, where=is_in("week_start", weeks)).count()
        if held != expected:
            raise FreezeVerificationError(
                f"{target} holds {held} rows for weeks {weeks[0]}..{weeks[-1]}, "
                f"the weekly tables {expected}; the manifest was not changed"
            )
        context.log.info(f"folded {len(weeks)} weeks ({expected} rows) into {target}")
        for monday in weeks:
            swaps.append(ManifestEntry(monday, weekly_table(monday), "retired", now))
            swaps.append(ManifestEntry(monday, target, "active", now))
    if swaps:
        upsert_manifest(lakehouse, swaps, metadata=metadata)
        expose_visits(lakehouse)
    # A week re-materialized while we copied it: carry its newest rows over (the weekly
    # asset does the same from its side when it sees the swap).
    for monday, version in copied.items():
        if lakehouse.version(weekly_table(monday)) != version:
            lakehouse.overwrite(
                yearly_table(iso_year(monday)),
                lakehouse.read(weekly_table(monday)),
                where=eq("week_start", monday),
                metadata=metadata,
            )
    purged = purge_retired_tables(
        lakehouse, older_than=now - dt.timedelta(hours=config.retire_grace_hours), metadata=metadata
    )
    return dg.Output(
        None,
        metadata={
            "weeks_folded": len(copied),
            "yearly_tables": ", ".join(yearly_table(y) for y in plan) or "none",
            "tables_purged": len(purged),
        },
    )


def purge_retired_tables(
    lakehouse: Lakehouse, *, older_than: dt.datetime, metadata: Mapping[str, Any]
) -> list[str]:
    """Delete retired tables past their grace period, then forget them in the manifest."""
    names = retired_tables_to_purge(manifest_entries(lakehouse), older_than=older_than)
    for name in names:
        lakehouse.drop(name)
    if names:
        lakehouse.delete(
            VISITS_MANIFEST,
            where=eq("status", "retired") & is_in("table_name", names),
            metadata=metadata,
        )
    return names


@dg.job(
    tags=NO_RETRY_ON_REFUSAL,
    description="Fold weekly visits tables older than a configured age into yearly tables.",
)
def freeze_visits_weeks() -> None:
    freeze_old_weeks()
