"""The telemetry data agent: finds subjects with pending work and asks for one run each.

It never starts Spark and never reads report data: it lists the landing zone, hashes only
files whose size or mtime moved, follows the control tables with delta-rs, registers new
subjects as dynamic partitions and requests a run per dirty subject, tagged with the
subject (the instance allows one run per subject tag at a time). Run keys derive from the
pending files' content hashes, so a re-notified unchanged file launches nothing; a
subject whose run failed on something transient is asked for again, with backoff
(`sensors/requested_again.py`). The decision is kept from tick to tick
(`sensors/telemetry_decision.py`), so a tick costs the files and control rows that
changed.
"""

import datetime as dt
from functools import partial

import dagster as dg

from assets.telemetry.pipeline import telemetry_job
from assets.telemetry.settings import LANDING_PREFIX, REPORT_SUFFIX, TelemetrySettings
from assets.telemetry.subjects import (
    SUBJECT_TAG,
    partition_key_problem,
    subject_of,
    subjects,
)
from resources import Lakehouse, LandingZone
from sensors import file_state, requested_again, telemetry_decision
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
    decision = telemetry_decision.kept(lakehouse, telemetry_files.name)
    index = decision.index
    if scan.looked_at is not None and decision.files_version == scan.seen.version:
        paths, known_subjects = scan.touched, set()
    else:
        # This process's index is not of the state the scan started from: every file.
        paths = scan.current.keys() | scan.seen.fingerprints.keys() | index.landed_paths()
        known_subjects = set(scan.seen.labels.values())
    relabel, unplaced, refused, seen_first = {}, [], {}, set()
    for path in sorted(paths):
        fingerprint = scan.current.get(path)
        subject = None
        if fingerprint is not None:
            subject = (
                None if scan.is_new_content(path) else scan.seen.labels.get(path)
            ) or subject_of(path, telemetry_settings, partial(landing.head, path))
            if subject is None:
                unplaced.append(path)
            elif problem := partition_key_problem(subject):
                refused[path] = (subject, f"{problem} (file {path})")
                subject = None
        if subject is not None and fingerprint is not None:
            if not index.has_landed(subject) and subject not in known_subjects:
                seen_first.add(subject)
            relabel[path] = subject
            index.land(path, (subject, fingerprint.sha256))
        else:
            index.land(path, None)
    if unplaced:
        context.log.warning(
            f"ignoring {len(unplaced)} report file(s) that name no subject under the "
            f"{telemetry_settings.subject_rule!r} rule (the folder rule's layout is "
            f"{LANDING_PREFIX}/<subject>/<file>{REPORT_SUFFIX}): {', '.join(unplaced[:20])}"
        )
    for subject, problem in sorted(dict(refused.values()).items()):
        context.log.error(f"telemetry subject {subject!r} cannot be a partition key: {problem}")

    telemetry_decision.follow_control_tables(decision, lakehouse)
    pending = index.pending(decision.reflected, dt.datetime.now(dt.UTC))
    # Files with no subject, or one no partition can have, are not remembered: looked at
    # (and named in the log) again while they are there.
    again = requested_again.due(context, telemetry_files.name)
    cursor = scan.cursor(
        lakehouse, leave_out=[*unplaced, *refused], relabel=relabel, extra=again.cursor
    )
    decision.files_version = file_state.cursor_extra(cursor, "state_version")
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
        ]
        + again.requests,
        # Subjects no earlier tick saw (the daemon skips any key already added).
        dynamic_partitions_requests=[subjects.build_add_request(sorted(seen_first))]
        if seen_first
        else [],
        cursor=cursor,
    )
