"""Write-audit-publish of event batches into `user_events`.

Write: `user_events_staging` parses a batch (`events_source`), deduplicates it by the
version order and writes it to the staging table (partitioned by batch, the batch's
partition replaced in one commit). Audit: blocking asset checks read what was staged:
keys non-null and unique, event times within bounds, the staged row count equal to the
batch's. Publish: `user_events` MERGEs the staged batch into the table in one commit
(`staging_merge`); it runs only when every audit passed, since a failed blocking check
stops the run before it. A batch that fails an audit stays staged for inspection (its
location is in the staging materialization's metadata).
"""

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dagster as dg
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from assets.catalog import RESTORE_WHOLE_TABLE, declared
from assets.materialization import commit_metadata, materialization_metadata
from assets.partition_range import SINGLE_RUN, materialize_partitions
from assets.run_policy import (
    AHEAD_IN_QUEUE,
    NO_RETRY_ON_REFUSAL,
    TRANSIENT_RETRIES,
    Refusal,
)
from assets.warehouse.events_source import (
    ParsedBatch,
    ParsedBatches,
    batch_file,
    parse_batches,
)
from assets.warehouse.key_index import KEY_DIGEST
from assets.warehouse.staging_merge import TABLE_COLUMNS, deduplicate, merge_batch
from resources import Lakehouse, LandingZone, SparkResource
from resources.lakehouse.frames import StagedParts
from resources.lakehouse.predicates import eq, is_in
from resources.landing import FileStat, LandingFileError

if TYPE_CHECKING:
    from resources.lakehouse.port import Data

STAGING = "user_events_staging"
EARLIEST_EVENT = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
EVENT_BATCHES = "event_batches"
event_batches = dg.DynamicPartitionsDefinition(name=EVENT_BATCHES)

KEYS_CHECK = "staged_keys_unique_and_non_null"
TIMES_CHECK = "staged_event_times_within_bounds"
COUNT_CHECK = "staged_row_count_matches_batch"


class EventSettings(dg.ConfigurableResource):
    """How event batches are audited and merged (resource `event_settings`)."""

    max_future_skew_hours: float = 24
    """An event time more than this many hours after the audit fails the batch."""


def _staged(lakehouse: Lakehouse, batch_id: str) -> pa.Table | DataFrame:
    """A staged batch as `merge_batch` takes it: delta-rs reads it into this process with
    its events' key digests (no round trip through Spark)."""
    return lakehouse.read_in_write_form(
        STAGING,
        where=eq("batch_id", batch_id),
        columns=TABLE_COLUMNS,
        computed={"key_digest": KEY_DIGEST},
    )


def _micros(instant: dt.datetime) -> int:
    return (instant - EPOCH) // dt.timedelta(microseconds=1)


def _shown(micros: int | None) -> str:
    return "-" if micros is None else (EPOCH + dt.timedelta(microseconds=micros)).isoformat()


@dataclass(frozen=True)
class Audit:
    """What the audits read of a staged batch (event times in epoch microseconds)."""

    batch_id: str
    rows: int
    null_keys: int
    duplicated_keys: int
    earliest: int | None
    latest: int | None
    max_future: dt.datetime

    @property
    def keys_pass(self) -> bool:
        return self.null_keys == 0 and self.duplicated_keys == 0

    @property
    def times_pass(self) -> bool:
        return (self.earliest is None or self.earliest >= _micros(EARLIEST_EVENT)) and (
            self.latest is None or self.latest <= _micros(self.max_future)
        )

    def results(self, *, batch_rows: int) -> list[dg.AssetCheckResult]:
        return [
            dg.AssetCheckResult(
                check_name=KEYS_CHECK,
                passed=self.keys_pass,
                metadata={"null_keys": self.null_keys, "duplicated_keys": self.duplicated_keys},
            ),
            dg.AssetCheckResult(
                check_name=TIMES_CHECK,
                passed=self.times_pass,
                metadata={
                    "earliest_event": _shown(self.earliest),
                    "latest_event": _shown(self.latest),
                    "allowed": f"{EARLIEST_EVENT.isoformat()} .. {self.max_future.isoformat()}",
                },
            ),
            dg.AssetCheckResult(
                check_name=COUNT_CHECK,
                passed=self.rows == batch_rows,
                metadata={"staged_rows": self.rows, "batch_rows": batch_rows},
            ),
        ]


def audits(lakehouse: Lakehouse, batch_ids: list[str], settings: EventSettings) -> dict[str, Audit]:
    """Read the staged batches back and measure what the audits judge, in one Spark job
    (a batch with nothing staged has 0 rows)."""
    measured = {
        row["batch_id"]: row
        for row in lakehouse.read(STAGING, where=is_in("batch_id", batch_ids))
        .groupBy("batch_id")
        .agg(
            F.count("*").alias("rows"),
            F.count_if(F.col("event_id").isNull()).alias("null_keys"),
            F.count_distinct("event_id").alias("keys"),
            F.min(F.unix_micros("event_timestamp")).alias("earliest"),
            F.max(F.unix_micros("event_timestamp")).alias("latest"),
        )
        .collect()
    }
    max_future = dt.datetime.now(dt.UTC) + dt.timedelta(hours=settings.max_future_skew_hours)
    nothing: dict[str, Any] = {
        "rows": 0,
        "null_keys": 0,
        "keys": 0,
        "earliest": None,
        "latest": None,
    }
    found = {}
    for batch_id in batch_ids:
        m = measured.get(batch_id, nothing)
        duplicated = m["rows"] - m["null_keys"] - m["keys"]
        found[batch_id] = Audit(
            batch_id, m["rows"], m["null_keys"], duplicated, m["earliest"], m["latest"], max_future
        )
    return found


@dg.asset(
    partitions_def=event_batches,
    backfill_policy=SINGLE_RUN,
    group_name="warehouse",
    kinds={"spark", "delta"},
    check_specs=[
        dg.AssetCheckSpec(name, asset="user_events_staging", blocking=True, description=text)
        for name, text in (
            (KEYS_CHECK, "Audit: every staged event has a key, and no key twice."),
            (
                TIMES_CHECK,
                "Audit: event times from 2000-01-01 to the audit's time plus the allowed skew.",
            ),
            (COUNT_CHECK, "Audit: the staging table holds exactly the batch's deduplicated rows."),
        )
    ],
    **declared("write-audit-publish", restore=RESTORE_WHOLE_TABLE, reads=["events"]),
)
def user_events_staging(
    context: dg.AssetExecutionContext,
    spark: SparkResource,
    lakehouse: Lakehouse,
    landing: LandingZone,
    event_settings: EventSettings,
) -> dg.MaterializeResult:
    """Write-audit-publish, step 1 and 2: the batch `events/<batch_id>.jsonl` parsed,
    deduplicated (newest version of each event) and staged in `user_events_staging`, then
    audited by blocking checks; `user_events` publishes it only if every audit passes. A
    run of several batches reads and parses them in one Spark pass, stages each in a
    commit of its own and passes an audit only when every batch does (its sensor then
    asks for each batch alone); a bad batch is refused alone, the others staged."""
    staged_rows: dict[str, int] = {}
    files: dict[str, FileStat] = {}
    batches: dict[str, ParsedBatch | Exception] = {}
    for batch_id in context.partition_keys:
        landed = _landed(landing, batch_id)
        if isinstance(landed, Refusal):
            batches[batch_id] = landed
        else:
            files[batch_id] = landed
    parsed_batches = ParsedBatches({}, None)
    if files:
        parsed_batches = parse_batches(spark.session(), landing, files)
        batches.update(parsed_batches.batches)
    deduplicated = _Deduplicated(lakehouse, parsed_batches, files)

    def stage(batch_id: str) -> dict[str, Any]:
        parsed = batches[batch_id]
        if isinstance(parsed, Exception):
            raise parsed
        staged, rows = deduplicated.part(batch_id)
        staged_rows[batch_id] = rows
        where = eq("batch_id", batch_id)
        result = lakehouse.overwrite(
            STAGING,
            staged,
            where=where,
            partition_by=["batch_id"],
            metadata=commit_metadata(context, partition_key=batch_id, sources=parsed.sources),
        )
        return materialization_metadata(
            lakehouse,
            result,
            partition_key=batch_id,
            sources=parsed.sources,
            extra={
                "staged_rows": dg.MetadataValue.int(rows),
                "lines_read": dg.MetadataValue.int(parsed.lines_read),
                "versions_dropped": dg.MetadataValue.int(parsed.lines_read - rows),
                "staged_at": dg.MetadataValue.path(lakehouse.uri(STAGING)),
                "staged_where": where.render(lakehouse.dialect),
            },
        )

    materialize_partitions(context, stage, on_failure="continue")
    audited = audits(lakehouse, list(staged_rows), event_settings)
    results = [audited[batch].results(batch_rows=rows) for batch, rows in staged_rows.items()]
    return dg.MaterializeResult(check_results=all_batches(list(staged_rows), results))


DEDUPLICATED_TOGETHER_BYTES = 256 * 2**20
"""A run's batches are deduplicated for staging in groups of consecutive batches whose files
add up to at most this (a bigger batch alone): a Spark job a group, not one a batch, and
no more than a group in the run's memory at once (delta-rs writes from it)."""


class _Deduplicated:
    """The run's parsed batches deduplicated, each batch's rows in the form the engine
    writes from (`Lakehouse.staged_parts`), a group of batches at a time as staging
    reaches them."""

    def __init__(
        self, lakehouse: Lakehouse, parsed: ParsedBatches, files: Mapping[str, FileStat]
    ) -> None:
        self._lakehouse, self._events = lakehouse, parsed.events
        self._group_of: dict[str, list[str]] = {}
        group: list[str] = []
        size = 0
        for batch_id in files:
            if not isinstance(parsed.batches.get(batch_id), ParsedBatch):
                continue
            if group and size + files[batch_id].size > DEDUPLICATED_TOGETHER_BYTES:
                group, size = [], 0
            group.append(batch_id)
            size += files[batch_id].size
            self._group_of[batch_id] = group
        self._parts: dict[str, StagedParts] = {}

    def part(self, batch_id: str) -> tuple["Data", int]:
        """The batch's newest version of each event, and how many there are."""
        if batch_id not in self._parts:
            assert self._events is not None, "only a parsed batch is staged"
            group = self._group_of[batch_id]
            frame = self._events.where(F.col("batch_id").isin(group))
            parts = self._lakehouse.staged_parts(
                deduplicate(frame).select(*TABLE_COLUMNS), "batch_id"
            )
            self._parts.update(dict.fromkeys(group, parts))
        # Let go of a group once its last batch is staged.
        return self._parts.pop(batch_id).part(batch_id)


def _landed(landing: LandingZone, batch_id: str) -> FileStat | Refusal:
    """The batch's file, or why the batch cannot be staged."""
    try:
        stat = landing.stat(batch_file(batch_id))
    except LandingFileError as error:
        refusal = Refusal(f"batch {batch_id}: {error}")
        refusal.__cause__ = error
        return refusal
    if stat is None:
        return Refusal(f"batch {batch_id}: {batch_file(batch_id)} is not in the landing zone")
    return stat


def all_batches(
    batch_ids: list[str], audits: list[list[dg.AssetCheckResult]]
) -> list[dg.AssetCheckResult]:
    """Each check's result over the batches of a run (each batch's results in `audits`,
    in the order of `batch_ids`): a batch's own when it is alone; else passed when every
    batch passed, naming the batches that did not with their facts."""
    if len(audits) == 1:
        return audits[0]
    combined = []
    for by_batch in zip(*audits, strict=True):
        failed = {
            batch_id: {k: getattr(v, "value", v) for k, v in result.metadata.items()}
            for batch_id, result in zip(batch_ids, by_batch, strict=True)
            if not result.passed
        }
        combined.append(
            dg.AssetCheckResult(
                check_name=by_batch[0].check_name,
                passed=not failed,
                metadata={
                    "batches": dg.MetadataValue.int(len(batch_ids)),
                    "failed_batches": dg.MetadataValue.json(failed),
                },
            )
        )
    return combined


@dg.asset(
    partitions_def=event_batches,
    deps=[user_events_staging],
    backfill_policy=SINGLE_RUN,
    group_name="warehouse",
    kinds={"spark", "delta"},
    **declared("newer-wins-merge", restore=RESTORE_WHOLE_TABLE, writes=["user_events_key_index"]),
)
def user_events(
    context: dg.AssetExecutionContext, lakehouse: Lakehouse, event_settings: EventSettings
) -> dg.MaterializeResult:
    """Write-audit-publish, step 3: the audited batch MERGEd into `user_events` in one
    commit, newest version of each event winning (deletes are tombstones), pinned to the
    batch's event days and the days the record-level index names for its keys. A run of
    several batches MERGEs each in a commit of its own, in the order they landed."""

    # The blocking checks stop a run whose audits fail before this step; a run of this
    # asset alone audits again, so an unaudited batch is never published.
    staged = lakehouse.exists(STAGING)
    audited = audits(lakehouse, context.partition_keys, event_settings) if staged else {}

    def publish(batch_id: str) -> dict[str, Any]:
        checked = audited.get(batch_id)
        if checked is None or not checked.rows:
            raise Refusal(f"batch {batch_id} is not staged: materialize user_events_staging first")
        if not (checked.keys_pass and checked.times_pass):
            raise Refusal(
                f"batch {batch_id} fails its audits (keys: {checked.null_keys} null, "
                f"{checked.duplicated_keys} duplicated; event times "
                f"{_shown(checked.earliest)} .. {_shown(checked.latest)}): fix the batch file "
                "and stage it again"
            )
        merged = merge_batch(
            lakehouse,
            _staged(lakehouse, batch_id),
            metadata=commit_metadata(context, partition_key=batch_id),
        )
        return materialization_metadata(
            lakehouse,
            merged.result,
            partition_key=batch_id,
            extra={
                "merged_days": dg.MetadataValue.int(len(merged.days)),
                "merged_day_range": f"{merged.days[0]} .. {merged.days[-1]}",
                "files_scanned": dg.MetadataValue.int(merged.files_in_window),
                "files_skipped": dg.MetadataValue.int(merged.files_skipped),
                "rows_repaired": dg.MetadataValue.int(merged.rows_repaired),
            },
        )

    materialize_partitions(context, publish, on_failure="continue")
    return dg.MaterializeResult()


event_batch_job = dg.define_asset_job(
    "event_batch_job",
    selection=dg.AssetSelection.assets(user_events_staging, user_events),
    description="Stage, audit and publish event batches (write-audit-publish): one batch, or "
    "a range of them, each staged, audited and published as it would be alone.",
    tags={**NO_RETRY_ON_REFUSAL, **AHEAD_IN_QUEUE},
    op_retry_policy=TRANSIENT_RETRIES,
)
