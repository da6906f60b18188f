"""What data engineers rely on: no work for unchanged files, late files repaired in
their own hours only, operator jobs, odd subject keys, and bad input named by file and line."""

from __future__ import annotations

import datetime as dt
import logging
import os
import random

import pytest
from support import VanishingListing
from telemetry_history import START, ReportFile, expected_hourly, expected_totals, history, report

from assets.telemetry import (
    TelemetrySettings,
    blacklist_telemetry_file,
    control,
    reingest_telemetry_file,
    release_quarantined_file,
)

FILES = history(["Tool01"], files_per_subject=6, rows_per_file=40)


@pytest.mark.long_on_delta_spark
def test_a_renotified_unchanged_file_does_no_work_and_launches_nothing(deployment):
    deployment.deliver(FILES)
    assert len(deployment.run_pending()) == 1
    raw_version = deployment.lakehouse.version(control.RAW)
    for f in FILES:  # re-notified: touched, content unchanged
        path = os.path.join(deployment.landing.root, f.path)
        os.utime(path, ns=(0, os.stat(path).st_mtime_ns + 10**9))
    result = deployment.tick()
    assert result.run_requests == []
    # Materialized by hand anyway (as from the UI): nothing is rewritten.
    run = deployment.materialize("Tool01")
    assert deployment.metadata(run, "telemetry_raw")["files_applied"] == 0
    assert deployment.metadata(run, "telemetry_running_totals")["regime"] == "up_to_date"
    assert deployment.lakehouse.version(control.RAW) == raw_version


@pytest.mark.long_on_delta_spark
def test_a_late_file_recomputes_only_the_totals_of_its_hours_and_one_row_per_later_hour(
    deployment,
):
    early, late, rest = FILES[:3], FILES[3], FILES[4:]
    deployment.deliver(early + rest)
    deployment.run_pending()
    assert deployment.run_pending() == []

    deployment.deliver([late])
    (request,) = deployment.run_pending()
    assert request.tags["telemetry/subject"] == "Tool01"
    run = deployment.runs[-1]
    totals = deployment.metadata(run, "telemetry_running_totals")
    late_hours = {r.ts.replace(minute=0, second=0, microsecond=0) for r in late.rows}
    first, last = min(late_hours), max(late_hours)
    in_its_hours = sum(
        1
        for f in FILES
        for r in f.rows
        if first <= r.ts.astimezone(dt.UTC) < last + dt.timedelta(hours=1)
    )
    later_hours = {r.ts.replace(minute=0, second=0, microsecond=0) for f in FILES for r in f.rows}
    assert totals["regime"] == "late"
    # Not every row after the late file's start: the rows of its hours, and one
    # checkpoint per hour from its first hour on.
    assert totals["rows_recomputed"] == in_its_hours
    assert totals["rows_replaced"] == in_its_hours - len(late.rows)
    assert totals["hour_starts_rewritten"] == sum(1 for h in later_hours if h >= first)
    # The materialization describes the view users read, with its latest rows read
    # through it, and what each of its two tables' commits did.
    everything = expected_totals(FILES)
    assert totals["table_name"] == totals["dagster/table_name"] == "telemetry_running_totals"
    assert totals["dagster/row_count"] == len(everything)
    last = everything[-1]
    assert f"| {last[3]} | {last[4]:,} | {last[5]:,} | {last[6]:,} |" in totals["latest_rows"]
    assert "telemetry_totals_within_hour" in totals["summary"]
    assert "telemetry_totals_hour_start" in totals["summary"]
    hourly = deployment.metadata(run, "telemetry_hourly")
    assert hourly["hours_recomputed"] == 4  # the late file covers 4 hours: only those
    # The chart on the materialization shows those hours, with their counts.
    chart = hourly["hourly_chart"]
    stored = [h for h in deployment.hourly() if h[1] in late_hours]
    assert chart.count("\n| 20") == len(stored) == 4
    assert all(f"| {h[1]:%Y-%m-%d %H:00} | {h[2]:,} | {h[3]:,} |" in chart for h in stored)
    assert deployment.totals() == expected_totals(FILES)
    assert deployment.hourly() == expected_hourly(FILES)


@pytest.mark.long_on_delta_spark
def test_data_after_everything_stored_is_seeded_from_the_last_totals(deployment):
    deployment.deliver(FILES[:5])
    deployment.run_pending()
    deployment.deliver(FILES[5:])
    deployment.run_pending()
    totals = deployment.metadata(deployment.runs[-1], "telemetry_running_totals")
    assert totals["regime"] == "append"
    assert totals["rows_recomputed"] == len(FILES[5].rows)
    assert totals["rows_replaced"] == 0
    assert deployment.totals() == expected_totals(FILES)


def test_an_appended_file_reingests_only_its_tail(deployment, settings):
    big = report("Tool01", START, 400, random.Random(1))
    content = big.content
    cut = content.index(b"\n", len(content) // 2) + 1
    deployment.write(big.path, content[:cut] + b"2024-05-01T0")  # half-written last line
    deployment.run_pending()
    first = deployment.metadata(deployment.runs[-1], "telemetry_raw")
    assert first["rows_written"] == content[:cut].count(b"\n") - 1
    deployment.write(big.path, content)
    deployment.run_pending()
    second = deployment.metadata(deployment.runs[-1], "telemetry_raw")
    assert second["changes"] == {big.path: "append"}
    new_rows = content.count(b"\n") - content[:cut].count(b"\n")
    previous_end = big.rows[first["rows_written"] - 1].ts
    window_rows = sum(1 for r in big.rows if previous_end - r.ts <= settings.back_correction_window)
    assert new_rows <= second["rows_written"] <= new_rows + window_rows
    assert deployment.totals() == expected_totals([big])


@pytest.mark.long_on_delta_spark
def test_a_rewritten_file_replaces_all_its_rows(deployment):
    original = FILES[0]
    deployment.deliver(FILES[:2])
    deployment.run_pending()
    rewritten = ReportFile(original.subject, original.name, original.rows[:10])
    deployment.deliver([rewritten])
    deployment.run_pending()
    assert deployment.metadata(deployment.runs[-1], "telemetry_raw")["changes"] == {
        original.path: "rewrite"
    }
    assert deployment.totals() == expected_totals([rewritten, FILES[1]])
    assert deployment.hourly() == expected_hourly([rewritten, FILES[1]])


@pytest.mark.long_on_delta_spark
def test_blacklist_removes_a_files_rows_and_repairs_the_totals(deployment):
    deployment.deliver(FILES)
    deployment.run_pending()
    deployment.operate(blacklist_telemetry_file, FILES[2].path)
    (request,) = deployment.run_pending()
    assert "blacklisted" in request.tags["telemetry/pending"]
    kept = [f for f in FILES if f is not FILES[2]]
    assert deployment.totals() == expected_totals(kept)
    assert deployment.hourly() == expected_hourly(kept)
    assert deployment.states()[FILES[2].path].status == "blacklisted"
    deployment.deliver([FILES[2]])  # delivered again: stays out
    assert deployment.run_pending() == []


@pytest.mark.long_on_delta_spark
def test_reingest_replaces_a_files_rows_and_totals_stay_exact(deployment):
    deployment.deliver(FILES)
    deployment.run_pending()
    deployment.operate(reingest_telemetry_file, FILES[1].path)
    deployment.run_pending()
    raw = deployment.metadata(deployment.runs[-1], "telemetry_raw")
    assert raw["changes"] == {FILES[1].path: "reingest"}
    assert deployment.totals() == expected_totals(FILES)
    assert deployment.run_pending() == []
    with pytest.raises(ValueError, match="no telemetry file 'telemetry/Tool01/nope.csv' is known"):
        deployment.operate(reingest_telemetry_file, "telemetry/Tool01/nope.csv")


@pytest.mark.long_on_delta_spark
def test_a_file_beyond_the_lateness_horizon_is_quarantined_until_released(deployment):
    deployment.settings = TelemetrySettings(lateness_horizon_hours=18)
    deployment.deliver(FILES[1:])
    deployment.run_pending()
    deployment.deliver([FILES[0]])  # its data ends ~20 h before the newest
    deployment.run_pending()
    run = deployment.runs[-1]
    check = {e.check_name: e for e in run.get_asset_check_evaluations()}["no_quarantined_files"]
    assert not check.passed and FILES[0].path in str(check.metadata["quarantined_files"].value)
    assert deployment.totals() == expected_totals(FILES[1:])
    (entry,) = control.quarantine_entries(deployment.lakehouse)
    assert entry.source == FILES[0].path and "lateness horizon is 18:00:00" in entry.reason
    assert deployment.run_pending() == []  # held, not retried

    deployment.operate(release_quarantined_file, FILES[0].path)
    deployment.run_pending()
    assert deployment.totals() == expected_totals(FILES)
    assert deployment.hourly() == expected_hourly(FILES)


@pytest.mark.parametrize(
    "subject",
    [
        "Tool 'O\"Brien'",
        # Quoting is per engine, and the quotes run on both; the other keys' delta-spark
        # halves add no engine operation and run in `make test-slow`.
        pytest.param("Linie 3 / Süd".replace("/", "-"), marks=pytest.mark.long_on_delta_spark),
        pytest.param("工具-七", marks=pytest.mark.long_on_delta_spark),
    ],
)
def test_odd_subject_keys_work_end_to_end(deployment, subject):
    files = history([subject], files_per_subject=2, rows_per_file=10)
    deployment.deliver(files)
    (request,) = deployment.run_pending()
    assert request.partition_key == subject and request.tags["telemetry/subject"] == subject
    assert deployment.instance.has_dynamic_partition("subjects", subject)
    assert deployment.totals() == expected_totals(files)


@pytest.mark.long_on_delta_spark
def test_a_key_dagster_cannot_hold_is_refused_by_name(deployment):
    good = history(["Tool01"], 1, 5)
    bad = history(["Tool...9"], 1, 5)
    deployment.deliver(good + bad)
    requests = deployment.run_pending()
    assert [r.partition_key for r in requests] == ["Tool01"]
    assert not deployment.instance.has_dynamic_partition("subjects", "Tool...9")


BAD = {
    "malformed": (b"2024-05-01T00:10:00Z,1,2\n", "expected 4 fields"),
    "negative": (b"2024-05-01T00:10:00Z,1,-2,0\n", "negative count out_of_spec='-2'"),
    "timestamp": (b"yesterday,1,2,0\n", "unparseable timestamp 'yesterday'"),
    "no_offset": (
        b"2024-05-01T00:10:00,1,2,0\n",
        "timestamp '2024-05-01T00:10:00' has no UTC offset",
    ),
    # A count that does not fit 64 bits is a bad row like any other, named.
    "overflow": (
        b"2024-05-01T00:10:00Z,99999999999999999999,0,0\n",
        "in_spec is out of range (at most 9223372036854775807)",
    ),
    # A clock set to 2999 must not become the subject's newest data.
    "far_future": (b"2999-01-01T00:00:00Z,1,0,0\n", "timestamp '2999-01-01T00:00:00Z' is in"),
}


# Parsing is the same on either engine; delta-spark's half runs in `make test-slow`.
@pytest.mark.long_on_delta_spark
@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_line_is_named_and_loses_nothing_committed(deployment, case):
    deployment.settings = TelemetrySettings(retry_backoff_seconds=0, max_parse_attempts=2)
    good, other = FILES[0], FILES[1]
    deployment.deliver([good, other])
    deployment.run_pending()
    line, message = BAD[case]
    broken = good.content + line  # the good file grows a bad line
    deployment.write(good.path, broken)
    deployment.deliver([FILES[2]])  # other files keep flowing
    deployment.run_pending()
    state = deployment.states()[good.path]
    bad_line = good.content.count(b"\n") + 1
    assert state.status == "retrying" and state.attempts == 1
    assert f"{good.path}:{bad_line}: {message}" in state.last_error
    assert deployment.totals() == expected_totals(FILES[:3])  # committed rows intact

    deployment.run_pending()  # the retry is due at once (backoff 0) and fails again
    state = deployment.states()[good.path]
    assert state.status == "failed" and state.attempts == 2
    check = {e.check_name: e for e in deployment.runs[-1].get_asset_check_evaluations()}
    assert not check["no_failed_files"].passed
    # Where the user looks: a warning in the run's log, and the check's own view.
    named = f"{good.path}:{bad_line}: {message}"
    warnings = [
        entry.user_message
        for entry in deployment.instance.all_logs(deployment.runs[-1].run_id)
        if entry.level == logging.WARNING
    ]
    assert any(w.startswith("failed file: ") and named in w for w in warnings), warnings
    assert named in check["no_failed_files"].metadata["files"].value
    assert deployment.run_pending() == []  # failed: not retried until the file changes
    deployment.write(good.path, good.content + b"2024-05-01T03:59:59Z,1,0,0\n")
    deployment.run_pending()
    assert deployment.states()[good.path].status == "ingested"


@pytest.mark.long_on_delta_spark
def test_an_empty_file_is_an_error_naming_it(deployment):
    deployment.write("telemetry/Tool01/empty.csv", b"")
    deployment.deliver(FILES[:1])
    deployment.run_pending()
    state = deployment.states()["telemetry/Tool01/empty.csv"]
    assert state.status == "retrying"
    assert state.last_error == "telemetry/Tool01/empty.csv: empty file: no header line"
    assert deployment.totals() == expected_totals(FILES[:1])


def test_a_retry_waits_for_its_backoff(deployment):
    deployment.write("telemetry/Tool01/bad.csv", b"ts,in,out\n")
    deployment.run_pending()
    state = deployment.states()["telemetry/Tool01/bad.csv"]
    assert "bad.csv:1: header is 'ts,in,out'" in state.last_error
    assert state.next_attempt_at > dt.datetime.now(dt.UTC) + dt.timedelta(seconds=50)
    assert deployment.run_pending() == []


@pytest.mark.long_on_delta_spark
def test_files_off_the_layout_and_special_files_never_block_the_subject(deployment, caplog):
    """A nested folder's file is no subject's data; a link to nothing and a named pipe
    cannot be read: each is named once and the subject's good files flow."""
    good = FILES[:2]
    deployment.deliver(good)
    folder = os.path.join(deployment.landing.root, "telemetry", "Tool01")
    deployment.write("telemetry/Tool01/sub/nested.csv", good[0].content)
    os.symlink(os.path.join(folder, "nowhere.csv"), os.path.join(folder, "dangling.csv"))
    os.mkfifo(os.path.join(folder, "pipe.csv"))
    with caplog.at_level(logging.WARNING):
        launched = deployment.run_pending()
    assert [r.partition_key for r in launched] == ["Tool01"]
    assert {row[2] for row in deployment.raw()} == {f.path for f in good}
    assert set(deployment.states()) == {f.path for f in good}
    warnings = "\n".join(caplog.messages)
    assert "telemetry/Tool01/dangling.csv skipped: it is a symbolic link to nothing" in warnings
    assert "telemetry/Tool01/pipe.csv skipped: it is a named pipe (FIFO)" in warnings
    assert deployment.run_pending() == []


@pytest.mark.long_on_delta_spark
def test_a_file_gone_between_listing_and_reading_is_recorded_alone(deployment):
    gone = "telemetry/Tool01/gone.csv"
    deployment.landing = VanishingListing(root=deployment.landing.root, vanished=gone)
    deployment.deliver(FILES[:2])
    deployment.run_pending()
    assert {row[2] for row in deployment.raw()} == {f.path for f in FILES[:2]}
    state = deployment.states()[gone]
    assert state.status == "retrying"
    assert state.last_error == f"{gone}: gone since it was listed"
