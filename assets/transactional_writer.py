"""Transactional Writer: exactly-once writes of an asset partition, also when replayed.

Every write of the platform is one Delta commit, so a killed run never leaves half a
write behind. A commit alone does not give *exactly once*, though: the retry of a run
that died just after its commit, or a replay of an input already written, would write
again. So a partition's write carries a Delta app transaction:

- app id: `<asset key>/<partition key>`;
- version: the number of the partition's input in the control table `input_versions`,
  which keeps each partition's inputs in the order it met them. An input whose digest
  equals the latest recorded one keeps that number; any other input (new or changed
  files, an older content coming back, the table restored under it) gets the next.

Delta commits the app transaction atomically with the data, so after any crash the table
itself says whether an input landed: when it records this input's number (or a later
one), the write is skipped, reported as `skipped: already committed at version N`, and
commits nothing.

Order is what makes a crash at any point safe: the input is registered first, the data
written second. A run killed between the two leaves a registered, uncommitted number,
which its retry finds (same digest) and writes.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg
import pyarrow as pa

from assets.materialization import materialization_metadata, skipped_metadata
from resources.lakehouse import AppTransaction, CommitResult, Lakehouse, StaleWriteError
from resources.lakehouse.port import LakehouseError
from resources.lakehouse.predicates import And, Value, eq, is_in
from resources.landing import Fingerprint, sources_digest

INPUT_VERSIONS = "input_versions"
INPUT_VERSIONS_SCHEMA = pa.schema(
    [
        pa.field("asset_key", pa.string()),
        pa.field("partition_key", pa.string()),
        pa.field("input_version", pa.int64()),
        pa.field("input_digest", pa.string()),
        pa.field("reason", pa.string()),
        pa.field("dagster_run_id", pa.string()),
        pa.field("registered_at", pa.timestamp("us", tz="UTC")),
    ]
)
APP_ID = "transaction_app_id"
INPUT_VERSION = "input_version"
"""Commit metadata of a transactional write: which app id and input it carried."""
REGISTER_ATTEMPTS = 20
"""Registrations of one asset are serialized: this many runs may register at once."""
COMPACT_EVERY = 50
"""An asset's partition of `input_versions` is compacted every this many of its
registrations, so a registration reads a bounded number of files whatever the history."""
REWRITE_TAG = "lakehouse/rewrite"
"""A run tagged `lakehouse/rewrite=true` writes its partitions even when their input is
already committed (e.g. after fixing data by hand in the table)."""


def app_id(asset_key: str, partition_key: str) -> str:
    return f"{asset_key}/{partition_key}"


def input_digest(facts: Mapping[str, Any]) -> str:
    """SHA-256 of the facts that define an input (canonical JSON: sorted keys, no
    whitespace), e.g. its files' digest and the code version that reads them."""
    encoded = json.dumps(facts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(encoded.encode()).hexdigest()


@dataclass(frozen=True)
class InputVersion:
    asset_key: str
    partition_key: str
    version: int
    digest: str

    @property
    def app_id(self) -> str:
        return app_id(self.asset_key, self.partition_key)

    @property
    def app_transaction(self) -> AppTransaction:
        return AppTransaction(self.app_id, self.version)

    @property
    def commit_facts(self) -> dict[str, Any]:
        return {APP_ID: self.app_id, INPUT_VERSION: self.version}


def registrations_id(asset_key: str) -> str:
    """The app id under which `input_versions` counts an asset's registration commits."""
    return f"{INPUT_VERSIONS}/{asset_key}"


def latest_inputs(
    lakehouse: Lakehouse, asset_key: str, partition_keys: Sequence[str]
) -> dict[str, InputVersion]:
    """The latest registered input of each of these partitions (never registered: absent)."""
    lakehouse = lakehouse.in_process()
    if not lakehouse.exists(INPUT_VERSIONS):
        return {}
    rows = lakehouse.read_arrow(
        INPUT_VERSIONS,
        where=And((eq("asset_key", asset_key), is_in("partition_key", partition_keys))),
        columns=["partition_key", "input_version", "input_digest"],
    ).to_pylist()
    latest: dict[str, InputVersion] = {}
    for row in rows:
        key = row["partition_key"]
        if key not in latest or row["input_version"] > latest[key].version:
            latest[key] = InputVersion(asset_key, key, row["input_version"], row["input_digest"])
    return latest


def latest_input(lakehouse: Lakehouse, asset_key: str, partition_key: str) -> InputVersion | None:
    return latest_inputs(lakehouse, asset_key, [partition_key]).get(partition_key)


def register_inputs(
    lakehouse: Lakehouse,
    *,
    asset_key: str,
    digests: Mapping[str, str],
    run_id: str,
    reason: str = "input",
    force: bool = False,
) -> dict[str, InputVersion]:
    """The number of each partition's input (`digests`: partition key -> digest): the
    latest one when its digest is the latest recorded (unless `force`), else the next,
    recorded before it is returned. One read and at most one commit for all of them, so a
    range run registers its days at the cost of one.

    Registrations of one asset are serialized by the control table's own app transaction
    (app id `input_versions/<asset key>`, one step per commit): two runs registering at
    once compute their numbers from the same state, one commits, and the other is refused,
    reads again and takes the numbers after.

    The control table is written in the process (delta-rs) whatever the engine: a row a
    commit is a Spark job's fixed cost on delta-spark, and every writer of the table must
    coordinate commits the same way on an object store."""
    if not digests:
        return {}
    lakehouse = lakehouse.in_process()
    # Created empty first: a commit that creates a table has no snapshot to check an app
    # transaction against, so two runs creating it at once would both pass. Partitioned
    # by asset: a registration reads and compacts its own asset's rows only.
    lakehouse.create(
        INPUT_VERSIONS,
        INPUT_VERSIONS_SCHEMA,
        metadata={"dagster_run_id": run_id},
        partition_by=["asset_key"],
    )
    counter = registrations_id(asset_key)
    attempt = 1
    while True:
        # The count before the rows: a registration committed between the two reads moves
        # the count past ours and refuses our commit, never leaving us a stale number.
        count = lakehouse.app_transaction_version(INPUT_VERSIONS, counter) or 0
        latest = latest_inputs(lakehouse, asset_key, list(digests))
        registered: dict[str, InputVersion] = {}
        for partition_key, digest in digests.items():
            current = latest.get(partition_key)
            if current is not None and current.digest == digest and not force:
                registered[partition_key] = current
            else:
                number = (current.version if current else 0) + 1
                registered[partition_key] = InputVersion(asset_key, partition_key, number, digest)
        new = [entry for key, entry in registered.items() if latest.get(key) != entry]
        if not new:
            return registered
        now = dt.datetime.now(dt.UTC)
        rows = pa.Table.from_pylist(
            [
                {
                    "asset_key": asset_key,
                    "partition_key": entry.partition_key,
                    "input_version": entry.version,
                    "input_digest": entry.digest,
                    "reason": reason,
                    "dagster_run_id": run_id,
                    "registered_at": now,
                }
                for entry in new
            ],
            schema=INPUT_VERSIONS_SCHEMA,
        )
        try:
            committed = lakehouse.append(
                INPUT_VERSIONS,
                rows,
                metadata={"dagster_run_id": run_id, "asset_key": asset_key, "reason": reason},
                app_transaction=AppTransaction(counter, count + 1),
            )
            if (count + 1) % COMPACT_EVERY == 0:
                # Without compaction every registration would read one more file than
                # the last (a backfill of 364 one-day runs reads 66,000).
                _compact(lakehouse, asset_key, run_id, committed.version)
            return registered
        except StaleWriteError:
            if attempt == REGISTER_ATTEMPTS:
                raise
            attempt += 1


def _compact(lakehouse: Lakehouse, asset_key: str, run_id: str, version: int) -> None:
    """The asset's registrations in one file; in a table made before `input_versions` was
    partitioned by asset, the whole table's, as then."""
    try:
        lakehouse.partition_files(INPUT_VERSIONS, where=eq("asset_key", asset_key))
        partition: dict[str, Value] | None = {"asset_key": asset_key}
    except LakehouseError:
        partition = None
    lakehouse.compact(
        INPUT_VERSIONS,
        partition=partition,
        metadata={"dagster_run_id": run_id, "asset_key": asset_key, "after_version": version},
    )


def register_input(
    lakehouse: Lakehouse,
    *,
    asset_key: str,
    partition_key: str,
    digest: str,
    run_id: str,
    reason: str = "input",
    force: bool = False,
) -> InputVersion:
    """`register_inputs` of one partition."""
    return register_inputs(
        lakehouse,
        asset_key=asset_key,
        digests={partition_key: digest},
        run_id=run_id,
        reason=reason,
        force=force,
    )[partition_key]


@dataclass(frozen=True)
class TransactionalWrite:
    """What a transactional write did: committed `result`, or skipped (`skipped` says why)."""

    input: InputVersion
    result: CommitResult | None
    skipped: str | None = None

    def progress(self) -> dict[str, Any]:
        """What a progress line says of it."""
        if self.result is None:
            return {"skipped": self.skipped}
        metrics = self.result.metrics
        return {
            "delta_version": self.result.version,
            **{name: metrics[name] for name in ("rows_inserted", "rows_updated", "rows_deleted")},
        }


def write_exactly_once(
    lakehouse: Lakehouse,
    *,
    table: str,
    asset_key: str,
    partition_key: str,
    digest: str,
    run_id: str,
    write: Callable[[AppTransaction, Mapping[str, Any]], CommitResult],
    create_empty: Callable[[], object],
    force: bool = False,
    registered: RegisteredInputs | None = None,
) -> TransactionalWrite:
    """Register the input, then call `write(app_transaction, commit_facts)` unless the
    table already holds this input. `write` makes one commit carrying the app transaction
    and the facts in its commit metadata (the restore job finds partitions by them).
    `registered`: the inputs of a range, registered before its first write.

    `create_empty` creates the table without rows (with the write's schema and
    partitioning) when it does not exist yet: a write that creates a table has no
    snapshot for Delta to check its app transaction against, so two runs of one input
    racing to create the table would both commit."""
    if registered is None and not lakehouse.exists(table):
        create_empty()  # a range's registration created it, before its first write
    if registered is not None and partition_key in registered.inputs:
        input_version = registered.inputs[partition_key]
        committed = registered.committed.get(input_version.app_id)
    else:
        input_version = register_input(
            lakehouse,
            asset_key=asset_key,
            partition_key=partition_key,
            digest=digest,
            run_id=run_id,
            force=force,
        )
        committed = lakehouse.app_transaction_version(table, input_version.app_id)
    if committed is not None and committed >= input_version.version:
        return TransactionalWrite(input_version, None, _already_committed(input_version, committed))
    try:
        return TransactionalWrite(
            input_version, write(input_version.app_transaction, input_version.commit_facts)
        )
    except StaleWriteError as stale:
        # A concurrent run committed this input, or a newer one, after our check.
        return TransactionalWrite(
            input_version, None, _already_committed(input_version, stale.current)
        )


@dataclass(frozen=True)
class RegisteredInputs:
    """A range's inputs, registered in one commit before its first partition is written,
    and the input each partition's app id had committed then (absent: none). A commit
    made after that read is still caught: the write's app transaction refuses it."""

    inputs: Mapping[str, InputVersion]
    committed: Mapping[str, int]


def _partition_digest(context: dg.AssetExecutionContext, sources: Sequence[Fingerprint]) -> str:
    code_version = context.assets_def.code_versions_by_key.get(context.asset_key)
    return input_digest({"sources": sources_digest(sources), "code_version": code_version})


def _rewrite(context: dg.AssetExecutionContext) -> bool:
    return context.run.tags.get(REWRITE_TAG, "").lower() == "true"


def register_partitions(
    context: dg.AssetExecutionContext,
    lakehouse: Lakehouse,
    *,
    table: str,
    sources: Mapping[str, Sequence[Fingerprint]],
    create_empty: Callable[[], object],
) -> RegisteredInputs:
    """Register the inputs of this run's partitions (`sources`: partition key -> its source
    files) in one commit, for `write_partition_once` to take: a range of 364 days then
    pays one registration, not 364. `create_empty` (see `write_exactly_once`) creates the
    table first when it does not exist, so no partition's write asks again."""
    if sources and not lakehouse.exists(table):
        create_empty()
    inputs = register_inputs(
        lakehouse,
        asset_key=context.asset_key.to_user_string(),
        digests={key: _partition_digest(context, files) for key, files in sources.items()},
        run_id=context.run.run_id,
        force=_rewrite(context),
    )
    committed = (
        lakehouse.app_transaction_versions(table, [entry.app_id for entry in inputs.values()])
        if inputs
        else {}
    )
    return RegisteredInputs(inputs, committed)


def write_partition_once(
    context: dg.AssetExecutionContext,
    lakehouse: Lakehouse,
    *,
    partition_key: str,
    table: str,
    sources: Sequence[Fingerprint],
    write: Callable[[AppTransaction, Mapping[str, Any]], CommitResult],
    create_empty: Callable[[], object],
    registered: RegisteredInputs | None = None,
) -> TransactionalWrite:
    """`write_exactly_once` for one of this run's asset partitions. The input is the partition's
    source files and the asset's code version: a changed `code_version` is a new input,
    so new code rewrites what old code wrote. `registered`: from `register_partitions`."""
    return write_exactly_once(
        lakehouse,
        table=table,
        asset_key=context.asset_key.to_user_string(),
        partition_key=partition_key,
        digest=_partition_digest(context, sources),
        run_id=context.run.run_id,
        write=write,
        create_empty=create_empty,
        force=_rewrite(context),
        registered=registered,
    )


def transactional_metadata(
    lakehouse: Lakehouse,
    outcome: TransactionalWrite,
    *,
    table: str,
    partition_key: str,
    sources: Sequence[Fingerprint],
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Dagster metadata of a transactional write, committed or skipped."""
    facts = {INPUT_VERSION: dg.MetadataValue.int(outcome.input.version), **(extra or {})}
    if outcome.result is None:
        return skipped_metadata(
            lakehouse,
            table,
            reason=outcome.skipped or "",
            partition_key=partition_key,
            sources=sources,
            extra=facts,
        )
    return materialization_metadata(
        lakehouse, outcome.result, partition_key=partition_key, sources=sources, extra=facts
    )


def _already_committed(registered: InputVersion, committed: int) -> str:
    if committed == registered.version:
        return f"already committed at version {committed}"
    return (
        f"already committed at version {committed}: a newer input than this one "
        f"(input version {registered.version}) was written meanwhile"
    )


def mark_restored(
    lakehouse: Lakehouse, table: str, *, undone: Sequence[Mapping[str, Any]], run_id: str, note: str
) -> list[str]:
    """After a restore: give every partition whose transactional commit was undone a new
    input version, so that its next run writes again (Delta's RESTORE brings files back
    but keeps the app transactions, which would otherwise call the undone input
    committed). `undone` is the commit metadata of the undone commits; returns the app
    ids marked."""
    partitions = sorted(
        {
            (str(meta["asset_key"]), str(meta["partition_key"]))
            for meta in undone
            if meta.get(APP_ID) and meta.get("asset_key") and meta.get("partition_key")
        }
    )
    digest = input_digest({"restored": table, "note": note})
    for asset_key in sorted({asset_key for asset_key, _ in partitions}):
        register_inputs(
            lakehouse,
            asset_key=asset_key,
            digests={key: digest for asset, key in partitions if asset == asset_key},
            run_id=run_id,
            reason=note,
            force=True,
        )
    return [app_id(asset_key, partition_key) for asset_key, partition_key in partitions]
