"""The two-stage transform/load pipeline's Dagster shape: dynamic partitions
`enriched_runs` (one per run directory, registered by the `enriched_run_directories`
sensor), assets `shredded_events` (stage) and `warehouse_events` (load), the job that
runs both for a run, and the operator job `skip_enriched_run`.

Both assets backfill in one run (a single-run backfill policy): a backlog of run
directories is staged and loaded with one Spark session, one commit per event type and
step, and one manifest move per step.
"""

import dagster as dg
from pydantic import Field

from assets.catalog import RESTORE_REPLAY, declared
from assets.materialization import commit_metadata
from assets.run_policy import NO_RETRY_ON_REFUSAL
from assets.warehouse.manifest import load_manifest as manifest
from assets.warehouse.manifest.enriched import RUN_PREFIX, run_id_of
from assets.warehouse.manifest.loader import DEFAULT_EVENT_TABLES, load, warehouse_table
from assets.warehouse.manifest.shredder import shred, stage_table
from resources import Lakehouse, LandingZone, SparkResource

ENRICHED_RUNS = "enriched_runs"
enriched_runs = dg.DynamicPartitionsDefinition(name=ENRICHED_RUNS)
MAX_LISTED = 20


class ManifestSettings(dg.ConfigurableResource):
    event_tables: dict[str, str] = DEFAULT_EVENT_TABLES
    """The event types the loader knows, each with its warehouse table definition: a Spark
    DDL column list naming `event_id` (the loader adds `run_id`)."""
    stuck_after_minutes: int = 30
    """A run left in NEW or PROCESSED this long without a Dagster run in progress for it
    is taken up again by the `stuck_enriched_runs` sensor (once per state it is stuck
    in)."""


def _listed(run_ids: list[str]) -> str:
    shown = ", ".join(run_ids[:MAX_LISTED])
    return shown + (f" ... ({len(run_ids)} in all)" if len(run_ids) > MAX_LISTED else "")


def _partition(context: dg.AssetExecutionContext) -> str:
    keys = context.partition_keys
    return keys[0] if len(keys) == 1 else f"{len(keys)} enriched runs"


@dg.asset(
    partitions_def=enriched_runs,
    backfill_policy=dg.BackfillPolicy.single_run(),
    group_name="warehouse",
    kinds={"spark", "delta"},
    **declared(
        "load-manifest",
        restore=RESTORE_REPLAY,
        reads=["enriched"],
        writes=["load_manifest"],
        relations=[stage_table(event_type) for event_type in DEFAULT_EVENT_TABLES],
    ),
)
def shredded_events(
    context: dg.AssetExecutionContext,
    spark: SparkResource,
    lakehouse: Lakehouse,
    landing: LandingZone,
) -> dg.MaterializeResult:
    """Load manifest, stage 1 (shredder): the run directory's events split by type into
    `shredded/<event_type>`, the stage's `_SUCCESS` written, the run moved NEW ->
    PROCESSED in `load_manifest`. A run flagged to_skip is left alone; a run found staged
    after a crash is promoted without reading it again."""
    run_ids = sorted(context.partition_keys)
    metadata = commit_metadata(context, partition_key=_partition(context))
    result = shred(
        spark.session(), lakehouse, landing, run_ids, by=context.run.run_id, metadata=metadata
    )
    if result.ignored_files:
        context.log.warning(
            "not event files (the layout is enriched/run=<id>/<file>, no sub-folders): "
            + ", ".join(result.ignored_files[:MAX_LISTED])
        )
    by_type: dict[str, int] = {}
    for facts in result.staged + result.promoted:
        for event_type, count in facts.events_by_type.items():
            by_type[event_type] = by_type.get(event_type, 0) + count
    return dg.MaterializeResult(
        metadata={
            "staged_runs": _listed([f.run_id for f in result.staged]),
            "promoted_runs": _listed([f.run_id for f in result.promoted]),
            "skipped_runs": _listed(result.to_skip),
            "already_processed": _listed(result.already),
            "events_by_type": dg.MetadataValue.json(by_type),
            "stage_tables": ", ".join(lakehouse.uri(stage_table(t)) for t in sorted(by_type)),
            "source_files": dg.MetadataValue.int(len(result.sources)),
            "manifest": dg.MetadataValue.path(lakehouse.uri(manifest.LOAD_MANIFEST)),
        }
    )


@dg.asset(
    partitions_def=enriched_runs,
    backfill_policy=dg.BackfillPolicy.single_run(),
    deps=[shredded_events],
    group_name="warehouse",
    kinds={"spark", "delta"},
    **declared(
        "load-manifest",
        restore=RESTORE_REPLAY,
        writes=["load_manifest"],
        relations=[warehouse_table(event_type) for event_type in DEFAULT_EVENT_TABLES],
    ),
)
def warehouse_events(
    context: dg.AssetExecutionContext,
    spark: SparkResource,
    lakehouse: Lakehouse,
    manifest_settings: ManifestSettings,
) -> dg.MaterializeResult:
    """Load manifest, stage 2 (loader): PROCESSED runs loaded into `warehouse/<event_type>`
    (each table's partitions of the runs replaced in one commit), then moved to LOADED. A
    run with an event type that has no table definition is refused whole, naming it."""
    run_ids = sorted(context.partition_keys)
    metadata = commit_metadata(context, partition_key=_partition(context))
    result = load(
        spark.session(),
        lakehouse,
        run_ids,
        manifest_settings.event_tables,
        by=context.run.run_id,
        metadata=metadata,
    )
    problems = [f"run {run_id}: {why}" for run_id, why in sorted(result.refused.items())]
    problems += [
        f"run {run_id} is not PROCESSED yet: materialize shredded_events for it first"
        for run_id in result.not_processed
    ]
    if problems:
        loaded = f"loaded: {_listed(result.loaded)}; " if result.loaded else ""
        raise dg.Failure(f"{loaded}nothing was loaded of:\n" + "\n".join(problems))
    return dg.MaterializeResult(
        metadata={
            "loaded_runs": _listed(result.loaded),
            "skipped_runs": _listed(result.to_skip),
            "already_loaded": _listed(result.already),
            "rows_by_type": dg.MetadataValue.json(result.rows_by_type),
            "warehouse_tables": ", ".join(
                lakehouse.uri(warehouse_table(t)) for t in sorted(result.rows_by_type)
            ),
            "manifest": dg.MetadataValue.path(lakehouse.uri(manifest.LOAD_MANIFEST)),
        }
    )


enriched_run_job = dg.define_asset_job(
    "enriched_run_job",
    selection=dg.AssetSelection.assets(shredded_events, warehouse_events),
    description="Stage (shred) and load one enriched run directory, through the load manifest.",
    tags=NO_RETRY_ON_REFUSAL,
)


class SkipRunConfig(dg.Config):
    run_id: str = Field(
        description="The run directory's id, `YYYY-MM-DD-HH-MM-SS` (without `run=`), e.g. "
        "`2024-05-01-10-00-00`."
    )
    reason: str = Field(default="", description="Why, recorded in the manifest's skip_reason.")


@dg.op
def flag_enriched_run(
    context: dg.OpExecutionContext, config: SkipRunConfig, lakehouse: Lakehouse
) -> None:
    if run_id_of(f"{RUN_PREFIX}{config.run_id}") is None:
        raise ValueError(
            f"{config.run_id!r} is not a run id: give the directory's YYYY-MM-DD-HH-MM-SS "
            "(without run=)"
        )
    row = manifest.flag_to_skip(
        lakehouse,
        config.run_id,
        reason=config.reason,
        by=context.run.run_id,
        metadata=commit_metadata(context, partition_key=config.run_id, reason=config.reason),
    )
    context.log.info(f"run {row.run_id} ({row.state}) is flagged to_skip: {config.reason}")


@dg.job(
    tags=NO_RETRY_ON_REFUSAL,
    description="Flag an enriched run to_skip in the load manifest: it is never processed or "
    "loaded (refused for a run already LOADED).",
)
def skip_enriched_run() -> None:
    flag_enriched_run()
