"""A range of partitions in one run: one Spark session, the partitions one at a time.

An asset with `SINGLE_RUN` is backfilled by one run whose context holds the whole range
(the UI's backfill, `dagster asset materialize --partition-range`). Booting a Spark
session per partition would cost more than the work of most partitions, so the run
boots one and materializes the partitions in order, each exactly as a run of that
partition alone would: its own commit, app transaction, Delta version and metadata.
Restore, the sensors and the checks therefore see no difference between the two.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, TypeVar

import dagster as dg

from assets.run_policy import Refusal

SINGLE_RUN = dg.BackfillPolicy.single_run()
T = TypeVar("T")


def parse_day(key: str) -> dt.date:
    """The date a daily (or weekly: its Monday) partition key names."""
    return dt.date.fromisoformat(key)


def existing_keys(partitions: dg.PartitionsDefinition | None) -> Callable[[str], bool]:
    """Whether a key of `partitions`, in its own form (an ISO day, aligned on its cadence),
    exists now: from its calendar's first key to its last, compared as text, since ISO
    days sort as their dates. Asked once: `has_partition_key` walks the calendar on every
    call, 0.5 ms each: a visits tick over 20,000 files took 10 s."""
    if not isinstance(partitions, dg.TimeWindowPartitionsDefinition):
        raise TypeError(f"not a calendar of partitions: {partitions!r}")
    if partitions.fmt != "%Y-%m-%d":
        raise ValueError(f"partition keys of the form {partitions.fmt!r} do not sort as text")
    first, last = partitions.get_first_partition_key(), partitions.get_last_partition_key()
    if first is None or last is None:
        return lambda key: False
    return lambda key: first <= key <= last


def stretches(items: Iterable[T], follows: Callable[[T, T], bool]) -> list[list[T]]:
    """`items` cut into runs of adjacent ones: an item starts a new stretch unless
    `follows(item, previous)`."""
    cut: list[list[T]] = []
    for item in items:
        if cut and follows(item, cut[-1][-1]):
            cut[-1].append(item)
        else:
            cut.append([item])
    return cut


def run_partitions(first: str, last: str) -> tuple[str | None, dict[str, str]]:
    """(partition_key, tags) of a run of the partitions `first` to `last`: the partition
    key for one, else the range tags a single-run backfill of them carries. Written here
    because neither `RunRequest` nor `execute_in_process` takes a range in Dagster 1.13."""
    if first == last:
        return first, {}
    return None, {
        "dagster/asset_partition_range_start": first,
        "dagster/asset_partition_range_end": last,
    }


def run_span(keys: Sequence[str]) -> str:
    """The run's partitions as one key, or its range as `first..last`."""
    return keys[0] if len(keys) == 1 else f"{keys[0]}..{keys[-1]}"


# The facts a progress line names, when a partition's metadata has them.
_PROGRESS_FACTS = ("delta_version", "rows_inserted", "rows_deleted", "visits", "skipped")
PROGRESS_EVERY_SECONDS = 2.0
"""A range logs a partition's line when this long has passed since the last line (and
always its first and last partition, and every failure): each line is an event in the
run's log, and a line per partition of a year of small days costs more than the days."""


def materialize_partitions(
    context: dg.AssetExecutionContext,
    materialize: Callable[[str], Mapping[str, Any]],
    *,
    on_failure: Literal["continue", "stop"],
) -> None:
    """Call `materialize(partition_key)` for each of the run's partitions, oldest first,
    and give each partition's materialization the metadata it returns.

    `on_failure`: "continue" for partitions that stand alone (the others still land),
    "stop" for partitions that build on the one before. A run of one partition raises
    that partition's error as it is. In a range, the partitions that committed are
    reported as materialized before the run fails naming the ones that did not; a re-run
    of the range finds them committed.
    """
    keys = context.partition_keys
    if len(keys) == 1:
        context.add_asset_metadata(dict(materialize(keys[0])), partition_key=keys[0])
        return
    done: dict[str, Mapping[str, Any]] = {}
    failed: dict[str, Exception] = {}
    last_line = float("-inf")
    for index, key in enumerate(keys, 1):
        started = time.monotonic()
        try:
            metadata = materialize(key)
        except Exception as error:
            failed[key] = error
            context.log.error(f"{key} ({index}/{len(keys)}) failed: {error}")
            if on_failure == "stop":
                break
            continue
        done[key] = metadata
        now = time.monotonic()
        if index == len(keys) or now - last_line >= PROGRESS_EVERY_SECONDS:
            last_line = now
            context.log.info(
                f"{key} ({index}/{len(keys)}) in {now - started:.1f} s: {_progress(metadata)}"
            )
    if not failed:
        for key, metadata in done.items():
            context.add_asset_metadata(dict(metadata), partition_key=key)
        return
    # The run fails, so Dagster would record no materialization at all: report the
    # partitions that did commit, or the UI would show committed data as missing.
    for key, metadata in done.items():
        context.log_event(
            dg.AssetMaterialization(asset_key=context.asset_key, partition=key, metadata=metadata)
        )
    not_run = [key for key in keys if key not in done and key not in failed]
    first_key, first_error = next(iter(failed.items()))
    # The data's own when every partition that failed was refused; else a failure of
    # something else, whose work its sensor asks for again.
    fail = Refusal if all(isinstance(e, Refusal) for e in failed.values()) else dg.Failure
    raise fail(
        description=(
            f"{len(failed)} of {len(keys)} partitions failed ({', '.join(failed)}); "
            f"{len(done)} committed"
            + (f", {len(not_run)} not run after the first failure" if not_run else "")
            + f". First error, {first_key}: {first_error}"
        ),
        metadata={
            "failed": dg.MetadataValue.json({key: str(error) for key, error in failed.items()}),
            "committed": dg.MetadataValue.json(list(done)),
            "not_run": dg.MetadataValue.json(not_run),
        },
    ) from first_error


def _progress(metadata: Mapping[str, Any]) -> str:
    facts = []
    for name in _PROGRESS_FACTS:
        if name in metadata:
            value = metadata[name]
            facts.append(f"{name}={getattr(value, 'value', value)}")
    return ", ".join(facts) or "done"
