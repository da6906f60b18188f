"""The visits file sensor: new days and weeks, and late files for materialized ones.

It never starts Spark: it lists the landing zone, hashes only files whose size or mtime
moved (`sensors/file_state.py` remembers the rest), and compares each touched partition's
source digest with the digest its latest materialization recorded. A partition never
materialized is new and gets its first run; a materialized one gets a run only when its
input really changed. Run keys carry that digest, so a re-notified file can never launch
the same work twice. A file of a day or week whose partition does not exist yet (today,
the current week) is kept out of the remembered state, so it is looked at again until its
partition exists and is requested then.

Adjacent partitions of one asset that need the same kind of run (new, or changed) are
asked for as one run over their range: the assets' single-run backfill policy builds a
range in one run and one Spark session, so 42 new days are two runs (days and weeks), not
84 runs each booting a JVM.
"""

import datetime as dt
import functools
import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import dagster as dg

from assets.materialization import latest_materialization, recorded_source_digest
from assets.overwriting import (
    daily_partitions,
    visits_daily_job,
    visits_weekly_job,
    weekly_partitions,
)
from assets.overwriting.calendar import day_of_file, day_of_folder, week_start
from assets.partition_range import existing_keys, run_partitions, stretches
from resources import Lakehouse, LandingZone
from resources.landing import Fingerprint, sources_digest
from sensors import file_state
from sensors.cadence import file_sensor

VISITS_DAILY_KEY = dg.AssetKey("visits_daily")
VISITS_WEEKLY_KEY = dg.AssetKey("visits_weekly")
JOB_FOR_ASSET = {VISITS_DAILY_KEY: visits_daily_job.name, VISITS_WEEKLY_KEY: visits_weekly_job.name}
PARTITIONS = {VISITS_DAILY_KEY: daily_partitions, VISITS_WEEKLY_KEY: weekly_partitions}
STEP = {VISITS_DAILY_KEY: dt.timedelta(days=1), VISITS_WEEKLY_KEY: dt.timedelta(weeks=1)}


@dataclass(frozen=True)
class DirtyPartition:
    asset_key: dg.AssetKey
    partition_key: str
    digest: str
    changed_files: tuple[str, ...]
    replaces: int | None
    """Storage id of the latest materialization, whose result the run replaces (None:
    never materialized)."""

    @property
    def new(self) -> bool:
        return self.replaces is None

    @property
    def run_key(self) -> str:
        """What the run builds (the input's digest) and what it replaces: files that go
        back to an input built before (A, then B, then A again) get a run of their own,
        where a key of the digest alone would be one Dagster already used, and skips."""
        return (
            f"{self.asset_key.to_user_string()}:{self.partition_key}:{self.digest[:20]}"
            f":{self.replaces or 0}"
        )

    def follows(self, other: "DirtyPartition") -> bool:
        """Whether this partition comes right after `other`'s and needs the same kind of
        run, so that one range run builds both."""
        return (
            self.asset_key == other.asset_key
            and self.new == other.new
            and dt.date.fromisoformat(self.partition_key)
            - dt.date.fromisoformat(other.partition_key)
            == STEP[self.asset_key]
        )


@dataclass(frozen=True)
class PartitionRun:
    """Adjacent dirty partitions of one asset, built by one run."""

    partitions: tuple[DirtyPartition, ...]

    @property
    def run_key(self) -> str:
        first, last = self.partitions[0], self.partitions[-1]
        if first is last:
            return first.run_key
        digest = hashlib.sha256("".join(p.run_key for p in self.partitions).encode()).hexdigest()
        asset = first.asset_key.to_user_string()
        return f"{asset}:{first.partition_key}..{last.partition_key}:{digest[:20]}"

    def request(self) -> dg.RunRequest:
        first, last = self.partitions[0], self.partitions[-1]
        changed = sorted({path for p in self.partitions for path in p.changed_files})
        partition_key, range_tags = run_partitions(first.partition_key, last.partition_key)
        tags = {
            "visits/trigger": "new-partition" if first.new else "late-file",
            "visits/changed_files": ",".join(changed)[:1000],
            **range_tags,
        }
        return dg.RunRequest(
            run_key=self.run_key,
            job_name=JOB_FOR_ASSET[first.asset_key],
            partition_key=partition_key,
            tags=tags,
        )


def partition_runs(dirty: Iterable[DirtyPartition]) -> list[PartitionRun]:
    """`dirty` (in asset and partition order) cut into runs of adjacent partitions."""
    return [PartitionRun(tuple(run)) for run in stretches(dirty, DirtyPartition.follows)]


def partitions_of(folder: str) -> tuple[tuple[dg.AssetKey, str], ...]:
    """The (asset, partition) pairs whose input includes the visits files directly in
    `folder`."""
    return _partitions_of_day(day_of_folder(folder))


@functools.lru_cache(maxsize=4096)
def _partitions_of_day(day: dt.date | None) -> tuple[tuple[dg.AssetKey, str], ...]:
    if day is None:
        return ()
    return ((VISITS_DAILY_KEY, day.isoformat()), (VISITS_WEEKLY_KEY, week_start(day).isoformat()))


def folder_of(path: str) -> str:
    return path.rpartition("/")[0]


def by_folder(current: Mapping[str, Fingerprint]) -> dict[str, list[Fingerprint]]:
    """The files grouped by folder: a visits partition's input is whole folders, so a tick
    works per folder (hundreds), not per file (up to 100,000s)."""
    folders: dict[str, list[Fingerprint]] = {}
    for path, fingerprint in current.items():
        folders.setdefault(folder_of(path), []).append(fingerprint)
    return folders


def dirty_partitions(
    changed: Iterable[str],
    folders: Mapping[str, list[Fingerprint]],
    latest: Callable[[dg.AssetKey, str], dg.EventLogRecord | None],
) -> list[DirtyPartition]:
    """Partitions touched by `changed` files that were never materialized, or whose input
    (the files of `folders` they read) now differs from what their latest materialization
    read."""
    touched: dict[tuple[dg.AssetKey, str], list[str]] = {}
    for path in changed:
        for partition in partitions_of(folder_of(path)):
            touched.setdefault(partition, []).append(path)
    inputs: dict[tuple[dg.AssetKey, str], list[Fingerprint]] = {p: [] for p in touched}
    for folder, fingerprints in folders.items():
        for partition in partitions_of(folder):
            if partition in inputs:
                inputs[partition].extend(fingerprints)

    dirty = []
    for (asset_key, partition_key), paths in sorted(
        touched.items(), key=lambda item: (item[0][0].to_user_string(), item[0][1])
    ):
        record = latest(asset_key, partition_key)
        digest = sources_digest(inputs[(asset_key, partition_key)])
        if record is None and not inputs[(asset_key, partition_key)]:
            continue  # a removed file of a partition never built: nothing to build
        if digest != recorded_source_digest(record):
            replaces = record.storage_id if record else None
            dirty.append(
                DirtyPartition(asset_key, partition_key, digest, tuple(sorted(paths)), replaces)
            )
    return dirty


def existing_partitions() -> Callable[[tuple[dg.AssetKey, str]], bool]:
    """Whether an (asset, partition) pair exists now (asked once per tick)."""
    exists = {key: existing_keys(partitions) for key, partitions in PARTITIONS.items()}
    return lambda partition: exists[partition[0]](partition[1])


def latest_materializations(
    instance: dg.DagsterInstance,
) -> Callable[[dg.AssetKey, str], dg.EventLogRecord | None]:
    def lookup(asset_key: dg.AssetKey, partition_key: str) -> dg.EventLogRecord | None:
        return latest_materialization(instance, asset_key, partition_key)

    return lookup


@file_sensor(
    jobs=[visits_daily_job, visits_weekly_job],
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Materializes new days and weeks of visits (visits/date=YYYY-MM-DD/*.jsonl), "
    "and re-materializes only the materialized ones whose files changed (new, rewritten "
    "or removed files); adjacent days (weeks) go in one range run. Hashes only files whose "
    "size or mtime moved. Run keys carry the files' digest and the materialization the run "
    "replaces, so nothing runs twice and files changed back run again.",
)
def visits_late_files(
    context: dg.SensorEvaluationContext, landing: LandingZone, lakehouse: Lakehouse
) -> dg.SensorResult:
    scan = file_state.scan(
        visits_late_files.name, context, lakehouse, landing, [("visits", ".jsonl")]
    )
    current, changed = scan.current, scan.changed()
    unplaced = sorted(p for p in changed if day_of_file(p) is None and p in current)
    if unplaced:
        context.log.warning(f"ignoring files outside visits/date=YYYY-MM-DD/: {unplaced[:5]}")
    exists = existing_partitions()
    folders = by_folder(current)
    latest = latest_materializations(context.instance)
    dirty = [
        partition
        for partition in dirty_partitions(changed, folders, latest)
        if exists((partition.asset_key, partition.partition_key))
    ]
    # A file of a day or week whose partition does not exist yet is not remembered: it is
    # looked at again until its partition exists.
    kept = {
        fingerprint.path: fingerprint
        for folder, fingerprints in folders.items()
        if all(map(exists, partitions_of(folder)))
        for fingerprint in fingerprints
    }
    return dg.SensorResult(
        run_requests=[run.request() for run in partition_runs(dirty)],
        cursor=scan.cursor(lakehouse, kept),
    )
