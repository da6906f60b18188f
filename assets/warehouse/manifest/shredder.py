"""The shredder: a run directory's events split by type into the stage area, then the
stage's own `_SUCCESS`, then the manifest's move to PROCESSED.

Stage area: one Delta table per event type, `shredded/<event_type>` (`run_id`,
`event_id`, `event` as canonical JSON, `source_file`, `source_line`), partitioned by run;
and per run a marker `shredded/_runs/run=<run id>/_SUCCESS` holding, as JSON, the event
count per type. A run's stage is complete exactly when its marker exists.

Recovery of a run left in NEW by a crash: with its marker, it is promoted to PROCESSED
with the facts the marker holds (nothing is read again); without it, whatever the crashed
attempt staged is cleaned by staging again, each type's partitions replaced in one commit
(replaceWhere on the run ids).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from assets.source_files import Problem, SourceDataError
from assets.warehouse.manifest import load_manifest as manifest
from assets.warehouse.manifest.enriched import (
    SUCCESS,
    parse_runs,
    run_files,
    run_folder,
)
from assets.warehouse.manifest.load_manifest import NEW, StageFacts
from resources import Lakehouse, LandingZone
from resources.lakehouse.predicates import is_in
from resources.landing import Fingerprint

STAGE = "shredded"
STAGE_COLUMNS = ("run_id", "event_id", "event", "source_file", "source_line")
MAX_REPORTED_CONFLICTS = 10

Step = Callable[[str], None]
"""Called with a step's name once it is durable (tests crash a process there)."""


def no_step(_: str) -> None:
    return None


def stage_table(event_type: str) -> str:
    return f"{STAGE}/{event_type}"


def stage_path(run_id: str) -> str:
    return f"{STAGE}/_runs/run={run_id}"


def _marker(run_id: str) -> str:
    return f"{stage_path(run_id)}/{SUCCESS}"


@dataclass
class Shredded:
    staged: list[StageFacts] = field(default_factory=list)
    """Runs staged by this call."""
    promoted: list[StageFacts] = field(default_factory=list)
    """Runs found staged (marker present) and moved on to PROCESSED."""
    to_skip: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    """Runs past NEW before this call."""
    sources: list[Fingerprint] = field(default_factory=list)
    ignored_files: list[str] = field(default_factory=list)


def _facts_from_marker(lakehouse: Lakehouse, run_id: str, text: str) -> StageFacts:
    return StageFacts(run_id, json.loads(text)["events_by_type"], lakehouse.uri(stage_path(run_id)))


def _refuse_conflicting_copies(frame) -> None:
    """One event id with two different contents in a run is an upstream defect: refused,
    naming the id and its lines. Identical copies are one event."""
    conflicts = (
        frame.groupBy("run_id", "event_id")
        .agg(
            F.count_distinct("event").alias("versions"),
            F.sort_array(F.collect_list(F.concat_ws(":", "source_file", "source_line"))).alias(
                "lines"
            ),
        )
        .where(F.col("versions") > 1)
        .orderBy("run_id", "event_id")
        .limit(MAX_REPORTED_CONFLICTS + 1)
        .collect()
    )
    if conflicts:
        raise SourceDataError(
            "enriched",
            [
                Problem(
                    row.lines[0].rsplit(":", 1)[0],
                    None,
                    f"event_id {row.event_id!r} has {row.versions} different contents "
                    f"({', '.join(row.lines[:5])})",
                )
                for row in conflicts[:MAX_REPORTED_CONFLICTS]
            ],
            more=len(conflicts) > MAX_REPORTED_CONFLICTS,
        )


def _stage(
    spark: SparkSession,
    lakehouse: Lakehouse,
    landing: LandingZone,
    run_ids: Sequence[str],
    *,
    metadata: dict,
    on_step: Step,
    result: Shredded,
) -> list[StageFacts]:
    files_by_run = {}
    for run_id in run_ids:
        if not landing.exists(f"{run_folder(run_id)}/{SUCCESS}"):
            raise SourceDataError(
                "enriched",
                [
                    Problem(
                        run_folder(run_id),
                        None,
                        f"has no {SUCCESS}: the upstream writer has not finished it",
                    )
                ],
            )
        files, ignored = run_files(landing, run_id)
        files_by_run[run_id] = files
        result.ignored_files.extend(ignored)
    parsed = parse_runs(spark, landing, files_by_run)
    result.sources.extend(parsed.sources)
    # Identical copies are one event, staged with the first line that holds it.
    first = F.min(F.struct("source_file", "source_line"))
    events = (
        parsed.frame.groupBy("run_id", "event_type", "event_id", "event")
        .agg(first.alias("first"))
        .select("run_id", "event_type", "event_id", "event", "first.*")
        .localCheckpoint()  # folded once for the conflict check, the counts and each type
    )
    _refuse_conflicting_copies(events)
    counts: dict[str, dict[str, int]] = {run_id: {} for run_id in run_ids}
    for row in events.groupBy("run_id", "event_type").count().collect():
        counts[row.run_id][row.event_type] = row["count"]
    batch = is_in("run_id", sorted(run_ids))
    for event_type in sorted({t for by_type in counts.values() for t in by_type}):
        lakehouse.overwrite(
            stage_table(event_type),
            events.where(F.col("event_type") == event_type).select(*STAGE_COLUMNS),
            where=batch,
            partition_by=["run_id"],
            metadata={**metadata, "event_type": event_type},
        )
    on_step("staged")
    facts = []
    for run_id in run_ids:
        lakehouse.write_marker(
            _marker(run_id), json.dumps({"run_id": run_id, "events_by_type": counts[run_id]})
        )
        facts.append(StageFacts(run_id, counts[run_id], lakehouse.uri(stage_path(run_id))))
    on_step("stage_success")
    return facts


def shred(
    spark: SparkSession,
    lakehouse: Lakehouse,
    landing: LandingZone,
    run_ids: Sequence[str],
    *,
    by: str,
    metadata: dict,
    on_step: Step = no_step,
) -> Shredded:
    """Stage the runs' events and move them to PROCESSED (see the module). Runs flagged
    to_skip are left alone; runs past NEW are done."""
    rows = manifest.read(lakehouse, run_ids)
    unknown = [run_id for run_id in run_ids if run_id not in rows]
    if unknown:
        manifest.add(lakehouse, unknown, by=by, metadata=metadata)
        rows = manifest.read(lakehouse, run_ids)
    on_step("added")
    result = Shredded()
    pending = []
    for run_id in run_ids:
        row = rows[run_id]
        if row.to_skip:
            result.to_skip.append(run_id)
        elif row.state != NEW:
            result.already.append(run_id)
        elif (marker := lakehouse.read_marker(_marker(run_id))) is not None:
            result.promoted.append(_facts_from_marker(lakehouse, run_id, marker))
        else:
            pending.append(run_id)
    if pending:
        result.staged = _stage(
            spark,
            lakehouse,
            landing,
            pending,
            metadata=metadata,
            on_step=on_step,
            result=result,
        )
    moved = result.promoted + result.staged
    if moved:
        manifest.mark_processed(lakehouse, moved, by=by, metadata=metadata)
    on_step("processed")
    return result
