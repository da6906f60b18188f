"""The visits file sensor: new days, and late files for materialized ones.

It never starts Spark: it lists the landing zone, hashes only files whose size or mtime
moved (`sensors/file_state.py` remembers the rest), and compares each touched partition's
source digest with the digest its latest materialization recorded. A day never
materialized is new and gets its first run; a materialized one gets a run only when its
input really changed. Run keys carry that digest, so a re-notified file can never launch
the same work twice. A file of a day whose partition does not exist yet (today) is kept
out of the remembered state, so it is looked at again until its day exists and is
requested then.

Adjacent days that need the same kind of run (new, or changed) are asked for as one run
over their range: visits_daily's single-run backfill policy builds a range in one run and
one Spark pass, so 42 new days are one run, not 42 runs each booting a JVM. The weeks
follow the days by declarative automation (visits_weekly reads visits_daily). A run that
failed on something transient is asked for again, with backoff
(`sensors/requested_again.py`): its days' digests have not changed, so its run key would
never launch again.
"""

import datetime as dt
import functools
import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import dagster as dg

from assets.materialization import latest_materialization, recorded_source_digest
from assets.overwriting import daily_partitions, visits_daily_job
from assets.overwriting.calendar import day_of_file, day_of_folder
from assets.partition_range import existing_keys, run_partitions, stretches
from resources import Lakehouse, LandingZone
from resources.landing import Fingerprint, sources_digest
from sensors import file_state, requested_again
from sensors.cadence import file_sensor

VISITS_DAILY_KEY = dg.AssetKey("visits_daily")


@dataclass(frozen=True)
class DirtyDay:
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
            f"{VISITS_DAILY_KEY.to_user_string()}:{self.partition_key}:{self.digest[:20]}"
            f":{self.replaces or 0}"
        )

    def follows(self, other: "DirtyDay") -> bool:
        """Whether this day comes right after `other` and needs the same kind of run, so
        that one range run builds both."""
        apart = dt.date.fromisoformat(self.partition_key) - dt.date.fromisoformat(
            other.partition_key
        )
        return self.new == other.new and apart == dt.timedelta(days=1)


@dataclass(frozen=True)
class DayRun:
    """Adjacent dirty days, built by one run."""

    days: tuple[DirtyDay, ...]

    @property
    def run_key(self) -> str:
        first, last = self.days[0], self.days[-1]
        if first is last:
            return first.run_key
        digest = hashlib.sha256("".join(d.run_key for d in self.days).encode()).hexdigest()
        asset = VISITS_DAILY_KEY.to_user_string()
        return f"{asset}:{first.partition_key}..{last.partition_key}:{digest[:20]}"

    def request(self) -> dg.RunRequest:
        first, last = self.days[0], self.days[-1]
        changed = sorted({path for d in self.days for path in d.changed_files})
        partition_key, range_tags = run_partitions(first.partition_key, last.partition_key)
        tags = {
            "visits/trigger": "new-partition" if first.new else "late-file",
            "visits/changed_files": ",".join(changed)[:1000],
            **range_tags,
        }
        return dg.RunRequest(
            run_key=self.run_key,
            job_name=visits_daily_job.name,
            partition_key=partition_key,
            tags=tags,
        )


def day_runs(dirty: Iterable[DirtyDay]) -> list[DayRun]:
    """`dirty` (in day order) cut into runs of adjacent days."""
    return [DayRun(tuple(run)) for run in stretches(dirty, DirtyDay.follows)]


def folder_of(path: str) -> str:
    return path.rpartition("/")[0]


@functools.lru_cache(maxsize=4096)
def day_key(folder: str) -> str | None:
    """The day (partition key) whose input is the visits files directly in `folder`."""
    day = day_of_folder(folder)
    return day.isoformat() if day else None


def dirty_days(
    changed: Iterable[str],
    files_in: Callable[[str], list[Fingerprint]],
    latest: Callable[[str], dg.EventLogRecord | None],
) -> list[DirtyDay]:
    """Days touched by `changed` files that were never materialized, or whose input (the
    files of their folder, `files_in(folder)`) now differs from what their latest
    materialization read."""
    touched: dict[str, list[str]] = {}
    folders: dict[str, str] = {}
    for path in changed:
        folder = folder_of(path)
        if (key := day_key(folder)) is not None:
            touched.setdefault(key, []).append(path)
            folders[key] = folder

    dirty = []
    for partition_key, paths in sorted(touched.items()):
        record = latest(partition_key)
        inputs = files_in(folders[partition_key])
        digest = sources_digest(inputs)
        if record is None and not inputs:
            continue  # a removed file of a day never built: nothing to build
        if digest != recorded_source_digest(record):
            replaces = record.storage_id if record else None
            dirty.append(DirtyDay(partition_key, digest, tuple(sorted(paths)), replaces))
    return dirty


def latest_materializations(
    instance: dg.DagsterInstance,
) -> Callable[[str], dg.EventLogRecord | None]:
    def lookup(partition_key: str) -> dg.EventLogRecord | None:
        return latest_materialization(instance, VISITS_DAILY_KEY, partition_key)

    return lookup


@file_sensor(
    jobs=[visits_daily_job],
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Materializes new days of visits (visits/date=YYYY-MM-DD/*.jsonl), and "
    "re-materializes only the materialized ones whose files changed (new, rewritten or "
    "removed files); adjacent days go in one range run. Hashes only files whose size or "
    "mtime moved. Run keys carry the files' digest and the materialization the run "
    "replaces, so nothing runs twice and files changed back run again. visits_weekly "
    "follows by declarative automation.",
)
def visits_late_files(
    context: dg.SensorEvaluationContext, landing: LandingZone, lakehouse: Lakehouse
) -> dg.SensorResult:
    scan = file_state.scan(
        visits_late_files.name, context, lakehouse, landing, [("visits", ".jsonl")]
    )
    changed = scan.changed()
    unplaced = sorted(p for p in changed if day_of_file(p) is None and p in scan.current)
    if unplaced:
        context.log.warning(f"ignoring files outside visits/date=YYYY-MM-DD/: {unplaced[:5]}")
    exists = existing_keys(daily_partitions)
    latest = latest_materializations(context.instance)
    dirty = [d for d in dirty_days(changed, scan.in_folder, latest) if exists(d.partition_key)]
    # A file of a day whose partition does not exist yet is not remembered: it is looked
    # at again until its day exists.
    waiting = [
        path
        for path in scan.touched
        if path in scan.current
        and (key := day_key(folder_of(path))) is not None
        and not exists(key)
    ]
    again = requested_again.due(context, visits_late_files.name)
    return dg.SensorResult(
        run_requests=[run.request() for run in day_runs(dirty)] + again.requests,
        cursor=scan.cursor(lakehouse, leave_out=waiting, extra=again.cursor),
    )
