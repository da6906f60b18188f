"""Merger: `devices`, a daily CDC file merged into one Delta table with soft deletes.

The MERGE never inserts a row marked deleted, so replaying a batch that deleted a device
cannot bring it back; updating a matched row with the batch's values is idempotent. The
MERGE is a Transactional Writer's (assets/transactional_writer.py): a day whose
file is already merged is skipped without a commit, so replaying an old day after newer
ones cannot bring its older values back.

A Merger applies days in the order they are merged, so days are merged in date order:
a range is one run that merges its days oldest first and stops at the first that fails
(the single-run backfill policy), and `devices_job` runs one at a time (its
`updates/in_order` tag, limited to 1 in `platform/dagster.yaml`), in the order they were
queued. Days launched together, by the sensor or a backfill, can therefore not race each
other into the table out of order.
"""

import dagster as dg
import pyarrow as pa
from pyspark.sql import functions as F

from assets.catalog import RESTORE_WHOLE_TABLE, declared
from assets.materialization import commit_metadata
from assets.partition_range import SINGLE_RUN, materialize_partitions, parse_day
from assets.progress import Progress
from assets.run_policy import IN_ORDER
from assets.transactional_writer import transactional_metadata, write_partition_once
from assets.updates.change_files import DEVICE_COLUMNS, parse_device_changes
from resources import Lakehouse, LandingZone, SparkResource
from resources.lakehouse import WhenMatchedDelete, WhenMatchedUpdate, WhenNotMatchedInsert
from resources.lakehouse.port import MergeClause
from resources.lakehouse.predicates import IsTrue, Not, from_source, matches

DEVICES = "devices"
DEVICES_SCHEMA = pa.schema([pa.field(name, pa.string()) for name in DEVICE_COLUMNS])
daily_changes = dg.DailyPartitionsDefinition(start_date="2024-01-01")

DEVICE_MERGE: list[MergeClause] = [
    WhenMatchedDelete(condition=IsTrue("s.is_deleted")),
    WhenMatchedUpdate(set=from_source(("full_name",))),
    WhenNotMatchedInsert(condition=Not(IsTrue("s.is_deleted")), values=from_source(DEVICE_COLUMNS)),
]


@dg.asset(
    partitions_def=daily_changes,
    backfill_policy=SINGLE_RUN,
    group_name="updates",
    kinds={"spark", "delta"},
    # Part of each partition's input identity: bump it when the code changes what it
    # writes, and every partition's next run writes again instead of being skipped.
    code_version="1",
    **declared(
        "merger", restore=RESTORE_WHOLE_TABLE, reads=["devices_cdc"], writes=["input_versions"]
    ),
)
def devices(
    context: dg.AssetExecutionContext,
    spark: SparkResource,
    lakehouse: Lakehouse,
    landing: LandingZone,
) -> dg.MaterializeResult:
    """Devices known today, identified by (type, version), kept by merging each day's
    `devices_cdc/YYYY-MM-DD.csv`: deleted rows are removed and never re-inserted, a key
    changed twice in one file takes the file's last line. A range of days is one run that
    merges them oldest first."""

    def merge_day(partition_key: str) -> dict:
        progress = Progress(context.log, f"{DEVICES} {partition_key}")
        with progress.phase("read") as read:
            changes = parse_device_changes(spark.session(), landing, parse_day(partition_key))
            read.update(files=1, **changes.facts())
        metadata = commit_metadata(context, partition_key=partition_key, sources=[changes.source])
        with progress.phase("merge") as merged:
            outcome = write_partition_once(
                context,
                lakehouse,
                partition_key=partition_key,
                table=DEVICES,
                sources=[changes.source],
                write=lambda app_transaction, facts: lakehouse.merge(
                    DEVICES,
                    changes.frame.select(*DEVICE_COLUMNS, F.col("is_deleted")),
                    on=matches("type", "version"),
                    clauses=DEVICE_MERGE,
                    metadata={**metadata, **facts},
                    app_transaction=app_transaction,
                ),
                create_empty=lambda: lakehouse.create(DEVICES, DEVICES_SCHEMA, metadata=metadata),
            )
            merged.update(outcome.progress())
        return transactional_metadata(
            lakehouse,
            outcome,
            table=DEVICES,
            partition_key=partition_key,
            sources=[changes.source],
            extra=changes.facts(),
        )

    materialize_partitions(context, merge_day, on_failure="stop")
    return dg.MaterializeResult()


devices_job = dg.define_asset_job(
    "devices_job",
    selection=[devices],
    description="Merge days of devices_cdc into `devices`, oldest first (one MERGE per day, "
    "each once; a range is one run). One run at a time.",
    tags={IN_ORDER: "devices"},
)
