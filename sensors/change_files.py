"""The change-file sensor: new and changed daily change files of the updates patterns,
`devices_cdc/YYYY-MM-DD.csv` (`devices`, the Merger) and
`device_catalog/YYYY-MM-DD.jsonl` (`device_catalog`, the Stateful Merger).

Like the visits sensor it never starts Spark, hashes only files whose size or mtime moved,
and compares a day's file digest with the digest the day's latest materialization
recorded: a day never materialized, or whose file changed, is dirty. Run keys carry the
digest and the materialization they replace, so a re-notified unchanged file launches
nothing and a file changed back to an earlier content runs again.

`devices` (the Merger) applies days in the order it merges them: each stretch of
consecutive dirty days is one run that merges them oldest first, and `devices_job` runs
one at a time in the order its runs were requested. `device_catalog` builds each day on the
previous one: a tick finds the earliest catalog day that is dirty or older than its
predecessor's latest materialization (a predecessor rebuilt after it), provided its
predecessor is materialized (or it has none: the first day with a file), and requests it
and every later day up to a gap as one run, which merges them in order (the asset's
single-run backfill policy; one Spark session for a backlog of days). Its run key names
the range, its files' digest and the predecessor's materialization, so each rebuild of
the chain runs once. A run that failed on something other than its data is asked for
again, as the same range, with backoff, until it lands (`sensors/requested_again.py`):
each day is merged once (a merged day is skipped, a catalog day is built on exactly its
predecessor), so the days a failed run did merge are not merged twice.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass

import dagster as dg

from assets.materialization import latest_materialization, recorded_source_digest
from assets.partition_range import existing_keys, run_partitions, stretches
from assets.updates import device_catalog, device_catalog_job, devices, devices_job
from resources import Lakehouse, LandingZone
from resources.landing import Fingerprint, sources_digest
from sensors import file_state, requested_again
from sensors.cadence import file_sensor


@dataclass(frozen=True)
class ChangeSource:
    asset: dg.AssetsDefinition
    job_name: str
    folder: str
    suffix: str

    def day_of(self, path: str) -> dt.date | None:
        name = path.removeprefix(f"{self.folder}/")
        if "/" in name or not name.endswith(self.suffix):
            return None
        try:
            return dt.date.fromisoformat(name.removesuffix(self.suffix))
        except ValueError:
            return None


MATERIALIZATIONS_PAGE = 1000
SOURCES = (
    ChangeSource(devices, devices_job.name, "devices_cdc", ".csv"),
    ChangeSource(device_catalog, device_catalog_job.name, "device_catalog", ".jsonl"),
)


@dataclass(frozen=True)
class DayState:
    file: Fingerprint
    """The day's file as it is now."""
    recorded: str | None
    """The digest the day's latest materialization recorded (None: never materialized)."""
    materialized_at: int | None
    """Storage id of that materialization (orders materializations)."""

    @property
    def digest(self) -> str:
        return sources_digest([self.file])

    @property
    def label(self) -> str | None:
        """What the sensor remembers of the day's latest materialization, as its file's
        label: `<storage id>:<digest recorded>` (None: never materialized)."""
        if self.materialized_at is None:
            return None
        return f"{self.materialized_at}:{self.recorded or ''}"

    @classmethod
    def remembered(cls, file: Fingerprint, label: str | None) -> DayState:
        """The day as its file's `label` remembers it."""
        if label is None:
            return cls(file, None, None)
        at, _, recorded = label.partition(":")
        return cls(file, recorded, int(at))

    @property
    def dirty(self) -> bool:
        return self.recorded != self.digest

    @property
    def replaces(self) -> int:
        """The materialization a run of this day replaces, for run keys: with it, a file
        that goes back to content built before (A, B, then A again) gets a run of its own,
        where a key of the digest alone would be one Dagster already used, and skips."""
        return self.materialized_at or 0


def _short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _states(
    instance: dg.DagsterInstance,
    key: dg.AssetKey,
    files: dict[dt.date, Fingerprint],
    scan: file_state.Scan,
    after: int | None,
) -> tuple[dict[dt.date, DayState], int]:
    """Each day's state, and the storage id to look after at the next tick.

    What a day's latest materialization recorded is remembered in the label of the day's
    file (`<storage id>:<digest>`; none: never materialized), as of the materializations
    up to `after`: a tick fetches only those stored since (one query, paged), and looks
    up one by one only the days whose file is new to the state. A tick thus costs what
    changed, not one instance query per file (the cost grew with every day landed)."""
    newest: dict[str, dg.EventLogRecord] = {}
    if after is None:
        latest = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key), limit=1)
        after = latest.records[0].storage_id if latest.records else 0
        remembered: set[str] = set()
    else:
        remembered = set(scan.previous)
        while True:
            page = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=key, after_storage_id=after),
                limit=MATERIALIZATIONS_PAGE,
                ascending=True,
            ).records
            for found in page:
                if found.partition_key is not None:
                    newest[found.partition_key] = found
                after = found.storage_id
            if len(page) < MATERIALIZATIONS_PAGE:
                break
    states = {}
    for day, fingerprint in files.items():
        record: dg.EventLogRecord | None = newest.get(day.isoformat())
        if record is None and fingerprint.path not in remembered:
            record = latest_materialization(instance, key, day.isoformat())
        if record is not None:
            states[day] = DayState(fingerprint, recorded_source_digest(record), record.storage_id)
            continue
        states[day] = DayState.remembered(fingerprint, scan.seen.labels.get(fingerprint.path))
    return states, after


def _request(
    source: ChangeSource, day: dt.date, key: str, trigger: str, *, last: dt.date | None = None
) -> dg.RunRequest:
    """A run of `day`, or of the days `day` to `last` as one run."""
    partition_key, range_tags = run_partitions(day.isoformat(), (last or day).isoformat())
    return dg.RunRequest(
        run_key=key,
        job_name=source.job_name,
        partition_key=partition_key,
        tags={"updates/trigger": trigger, **range_tags},
    )


def devices_requests(source: ChangeSource, states: dict[dt.date, DayState]) -> list[dg.RunRequest]:
    """A run per stretch of consecutive dirty days of one kind (new, or changed), which
    merges them oldest first; the stretches are requested oldest first, and the job's
    runs go one at a time in that order (see the module)."""

    def follows(day: dt.date, previous: dt.date) -> bool:
        new, previous_new = states[day].recorded is None, states[previous].recorded is None
        return day - previous == dt.timedelta(days=1) and new == previous_new

    dirty = [day for day, state in sorted(states.items()) if state.dirty]
    requests = []
    for days in stretches(dirty, follows):
        first, last = days[0], days[-1]
        trigger = "new-partition" if states[first].recorded is None else "changed-file"
        if first == last:
            key = f"devices:{first}:{states[first].digest[:20]}:{states[first].replaces}"
        else:
            inputs = sources_digest(states[d].file for d in days)
            replaced = ",".join(str(states[d].replaces) for d in days)
            key = f"devices:{first}..{last}:{inputs[:20]}:{_short(replaced)}"
        requests.append(_request(source, first, key, trigger, last=last))
    return requests


def catalog_request(source: ChangeSource, states: dict[dt.date, DayState]) -> list[dg.RunRequest]:
    """The rest of the catalog's chain as one run, if any of it needs building (see the
    module)."""
    days = sorted(states)
    for index, day in enumerate(days):
        state = states[day]
        previous = states.get(day - dt.timedelta(days=1))
        if index > 0 and previous is None:
            # A gap: the day before has no file, so this day cannot be built on it.
            return []
        behind = (
            previous is not None
            and previous.materialized_at is not None
            and (state.materialized_at is None or state.materialized_at < previous.materialized_at)
        )
        if not (state.dirty or behind):
            continue
        if previous is not None and (previous.materialized_at is None or previous.dirty):
            return []  # the predecessor comes first
        trigger = (
            "new-partition"
            if state.recorded is None
            else ("changed-file" if state.dirty else "predecessor-rebuilt")
        )
        # Every later day builds on this one, so each is rebuilt after it: up to the last
        # day before a gap, in the same run.
        last = day
        while last + dt.timedelta(days=1) in states:
            last += dt.timedelta(days=1)
        after = previous.materialized_at if previous else 0
        inputs = sources_digest(states[d].file for d in days if day <= d <= last)
        replaced = ",".join(str(states[d].replaces) for d in days if day <= d <= last)
        key = f"device_catalog:{day}..{last}:{inputs[:20]}:{after}:{_short(replaced)}"
        return [_request(source, day, key, trigger, last=last)]
    return []


@file_sensor(
    jobs=[devices_job, device_catalog_job],
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Materializes new and changed days of `devices` (devices_cdc/YYYY-MM-DD.csv; "
    "consecutive days as one run, merged in order) and `device_catalog` "
    "(device_catalog/YYYY-MM-DD.jsonl; a changed day and every day after it as one run, "
    "merged in order, since each day builds on the one before). Run keys carry the files' "
    "digest and the materializations the run replaces: an unchanged file never launches a "
    "run twice, a file changed back runs again.",
)
def change_files(
    context: dg.SensorEvaluationContext, landing: LandingZone, lakehouse: Lakehouse
) -> dg.SensorResult:
    folders = [(source.folder, source.suffix) for source in SOURCES]
    scan = file_state.scan(change_files.name, context, lakehouse, landing, folders)
    looked_after = file_state.cursor_extra(context.cursor, "after") or {}
    left_out: list[str] = []
    labels: dict[str, str] = {}
    after: dict[str, int] = {}
    requests: list[dg.RunRequest] = []
    # Every day's file, not only the changed ones: a day's state follows its predecessor's
    # materializations. A change file is a day's input, so they number days, not 100,000s.
    for source in SOURCES:
        exists = existing_keys(source.asset.partitions_def)
        files: dict[dt.date, Fingerprint] = {}
        for path, fingerprint in sorted(scan.current.items()):
            if not path.startswith(f"{source.folder}/"):
                continue
            day = source.day_of(path)
            if day is None:
                context.log.warning(
                    f"ignoring {path}: the layout is {source.folder}/YYYY-MM-DD{source.suffix}"
                )
            if day is None or not exists(day.isoformat()):
                left_out.append(path)
                continue
            files[day] = fingerprint
        name = source.asset.key.to_user_string()
        states, after[name] = _states(
            context.instance, source.asset.key, files, scan, looked_after.get(name)
        )
        labels |= {s.file.path: s.label for s in states.values() if s.label is not None}
        if source.asset is devices:
            requests += devices_requests(source, states)
        else:
            requests += catalog_request(source, states)
    again = requested_again.due(context, change_files.name)
    return dg.SensorResult(
        run_requests=requests + again.requests,
        cursor=scan.cursor(
            lakehouse, leave_out=left_out, labels=labels, extra={"after": after, **again.cursor}
        ),
    )
