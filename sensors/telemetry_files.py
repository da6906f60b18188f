"""The telemetry data agent: finds subjects with pending work and asks for one run each.

It never starts Spark and never reads report data: it lists the landing zone, hashes only
files whose size or mtime moved, reads the control tables with delta-rs, registers new
subjects as dynamic partitions and requests a run per dirty subject, tagged with the
subject (the instance allows one run per subject tag at a time). Run keys derive from the
pending files' content hashes, so a re-notified unchanged file launches nothing.
"""

import datetime as dt
from functools import partial

import dagster as dg

from assets.telemetry import control
from assets.telemetry.pending import pending_subjects
from assets.telemetry.pipeline import telemetry_job
from assets.telemetry.settings import LANDING_PREFIX, REPORT_SUFFIX, TelemetrySettings
from assets.telemetry.subjects import (
    SUBJECT_TAG,
    partition_key_problem,
    subject_of,
    subjects,
)
from resources import Lakehouse, LandingZone
from sensors import file_state
from sensors.cadence import file_sensor


@file_sensor(
    job=telemetry_job,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Requests a `telemetry_job` run for every subject (telemetry/<subject>/) "
    "with new, changed, retried, released, blacklisted or re-ingest-requested files, and "
    "registers new subjects as partitions. One run per subject at a time (instance limit).",
)
def telemetry_files(
    context: dg.SensorEvaluationContext,
    landing: LandingZone,
    lakehouse: Lakehouse,
    telemetry_settings: TelemetrySettings,
) -> dg.SensorResult:
    scan = file_state.scan(
        telemetry_files.name, context, lakehouse, landing, [(LANDING_PREFIX, REPORT_SUFFIX)]
    )
    current, previous_subjects = scan.current, scan.seen.labels
    subject_by_path, unplaced = {}, []
    for path in current:
        subject = (
            None if scan.is_new_content(path) else previous_subjects.get(path)
        ) or subject_of(path, telemetry_settings, partial(landing.head, path))
        if subject is not None:
            subject_by_path[path] = subject
        else:
            unplaced.append(path)
    if unplaced:
        context.log.warning(
            f"ignoring {len(unplaced)} report file(s) that name no subject under the "
            f"{telemetry_settings.subject_rule!r} rule (the folder rule's layout is "
            f"{LANDING_PREFIX}/<subject>/<file>{REPORT_SUFFIX}): {', '.join(unplaced[:20])}"
        )

    refused: dict[str, str] = {}
    landed = {}
    for path, subject in subject_by_path.items():
        problem = partition_key_problem(subject)
        if problem:
            refused[subject] = f"{problem} (file {path})"
        else:
            landed[path] = (subject, current[path].sha256)
    for subject, problem in sorted(refused.items()):
        context.log.error(f"telemetry subject {subject!r} cannot be a partition key: {problem}")

    states = control.file_states(lakehouse)
    blacklist = {
        r["source"]: r["subject_key"]
        for r in control.read_records(lakehouse, control.BLACKLIST, None)
    }
    released = control.released(control.quarantine_entries(lakehouse))
    subject_keys = sorted(
        {s for s, _ in landed.values()} | {s.subject_key for s in states.values()}
    )
    pending = pending_subjects(
        landed,
        states,
        blacklist=blacklist,
        released=released,
        reflected=control.reconciled_versions(lakehouse, subject_keys),
        now=dt.datetime.now(dt.UTC),
    )
    seen_first = {s for s, _ in landed.values()} - set(previous_subjects.values())
    return dg.SensorResult(
        run_requests=[
            dg.RunRequest(
                run_key=p.run_key,
                partition_key=p.subject_key,
                tags={
                    SUBJECT_TAG: p.subject_key,
                    "telemetry/pending": ", ".join(f"{s} ({why})" for s, why in p.reasons)[:1000],
                },
            )
            for p in pending
        ],
        # Subjects no earlier tick saw (the daemon skips any key already added).
        dynamic_partitions_requests=[subjects.build_add_request(sorted(seen_first))]
        if seen_first
        else [],
        cursor=scan.cursor(lakehouse, labels=subject_by_path),
    )
