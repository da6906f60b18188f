"""The corpus for telemetry (`telemetry/<subject>/*.csv`): a bad file is isolated, not
the subject. One run takes a subject's good file and every bad file beside it: the data
tables hold exactly what the good file alone gives, and the control table records each
bad file, named with its line, for the operator (retried, then failed)."""

from __future__ import annotations

import logging

import dagster as dg
import pytest
from bad_input.corpus import (
    DANGLING,
    DIRECTORY,
    FIFO,
    VANISHED,
    Accepted,
    Case,
    Ignored,
    Refused,
    place,
    tables,
    vanishing,
)
from telemetry_deployment import TELEMETRY_ASSETS

from assets.telemetry import TelemetrySettings, control, subjects

pytestmark = pytest.mark.parametrize("engine", ["delta-rs"])  # the parser is Python's

SUBJECT = "Tool01"
HEADER = b"ts,in_spec,out_of_spec,mispicks\n"
GOOD = HEADER + b"2024-05-01T00:00:00Z,3,1,0\n2024-05-01T01:00:00+02:00,2,0,1\n"


def rows(*lines: str) -> bytes:
    return HEADER + "".join(f"{line}\n" for line in lines).encode()


CASES = [
    Case("empty", "empty file", {"empty.csv": b""}, Refused(": empty file: no header line")),
    Case(
        "wrong header",
        "missing field",
        {"header.csv": b"ts,in,out\n2024-05-01T00:10:00Z,1,2\n"},
        Refused(":1: header is 'ts,in,out'"),
    ),
    Case(
        "a header with an extra column",
        "extra field",
        {"extra.csv": b"ts,in_spec,out_of_spec,mispicks,x\n2024-05-01T00:10:00Z,1,2,0,9\n"},
        Refused(":1: header is 'ts,in_spec,out_of_spec,mispicks,x'"),
    ),
    Case(
        "a header naming a column twice",
        "duplicated field",
        {"twice.csv": b"ts,in_spec,in_spec,mispicks\n2024-05-01T00:10:00Z,1,2,0\n"},
        Refused(":1: header is 'ts,in_spec,in_spec,mispicks'"),
    ),
    Case(
        "a row short of a field",
        "malformed",
        {"short.csv": rows("2024-05-01T00:10:00Z,1,2")},
        Refused(":2: expected 4 fields"),
    ),
    Case(
        "a negative count",
        "wrong type",
        {"negative.csv": rows("2024-05-01T00:10:00Z,1,-2,0")},
        Refused(":2: negative count out_of_spec='-2'"),
    ),
    Case(
        "a count in words",
        "wrong type",
        {"words.csv": rows("2024-05-01T00:10:00Z,one,0,0")},
        Refused(":2: "),
    ),
    Case(
        "a 20-digit count",
        "out-of-range number",
        {"overflow.csv": rows("2024-05-01T00:10:00Z,99999999999999999999,0,0")},
        Refused(":2: in_spec is out of range (at most 9223372036854775807)"),
    ),
    Case(
        "a word for a time",
        "malformed",
        {"when.csv": rows("yesterday,1,2,0")},
        Refused(":2: unparseable timestamp 'yesterday'"),
    ),
    Case(
        "no offset",
        "no offset",
        {"local.csv": rows("2024-05-01T00:10:00,1,2,0")},
        Refused(":2: timestamp '2024-05-01T00:10:00' has no UTC offset"),
    ),
    Case(
        "February 30",
        "impossible date",
        {"feb30.csv": rows("2024-02-30T00:10:00Z,1,2,0")},
        Refused(":2: unparseable timestamp '2024-02-30T00:10:00Z'"),
    ),
    Case(
        "year 2999",
        "far future",
        {"future.csv": rows("2999-01-01T00:00:00Z,1,0,0")},
        Refused(":2: timestamp '2999-01-01T00:00:00Z' is in the future"),
    ),
    Case(
        "not UTF-8",
        "non-UTF-8",
        {"latin1.csv": HEADER + b"2024-05-01T00:10:00Z,1,2,0 caf\xe9\n"},
        Refused(":2: not valid UTF-8"),
    ),
    Case(
        "a 4 MB line",
        "huge line",
        {"huge.csv": rows("2024-05-01T00:10:00Z," + "9" * 4_000_000 + ",0,0")},
        Refused(":2: in_spec is out of range"),
    ),
    Case(
        "vanished", "vanished file", {"gone.csv": VANISHED}, Refused(": gone since it was listed")
    ),
    Case(
        "a named pipe",
        "FIFO",
        {"pipe.csv": FIFO},
        Ignored("pipe.csv skipped: it is a named pipe (FIFO)"),
    ),
    Case(
        "a link to nothing",
        "dangling symlink",
        {"link.csv": DANGLING},
        Ignored("link.csv skipped: it is a symbolic link to nothing"),
    ),
    Case("a folder", "directory", {"folder.csv": DIRECTORY}, Ignored("")),
    Case("a nested folder", "off the layout", {"sub/nested.csv": GOOD}, Ignored("")),
    Case(
        "a half-written last line",
        "truncated last line",
        {"growing.csv": GOOD + b"2024-05-01T02:00:00Z,1"},
        Accepted(("growing.csv",)),
    ),
    Case(
        "BOM and CRLF",
        "BOM",
        {"bom.csv": (b"\xef\xbb\xbf" + GOOD).replace(b"\n", b"\r\n")},
        Accepted(("bom.csv",)),
    ),
    Case("header only", "header only", {"header-only.csv": HEADER}, Accepted(("header-only.csv",))),
    Case(
        "year 1990",
        "far past",
        {"old.csv": rows("1990-01-01T00:00:00Z,1,0,0")},
        Accepted(("old.csv",)),
    ),
]


def folder_paths(cases) -> dict[str, object]:
    return {f"telemetry/{SUBJECT}/{name}": c for case in cases for name, c in case.files.items()}


def run(resources, instance) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        TELEMETRY_ASSETS, partition_key=SUBJECT, resources=resources, instance=instance
    )


def test_bad_telemetry_files_are_recorded_alone(lakehouse, landing, instance, caplog):
    instance.add_dynamic_partitions(subjects.name, [SUBJECT])
    settings = TelemetrySettings(retry_backoff_seconds=0)
    resources = {"lakehouse": lakehouse, "landing": landing, "telemetry_settings": settings}
    place(landing, {f"telemetry/{SUBJECT}/good.csv": GOOD})
    run(resources, instance)
    before = tables(lakehouse)
    good_state = control.file_states(lakehouse)[f"telemetry/{SUBJECT}/good.csv"]

    refused = [case for case in CASES if isinstance(case.outcome, Refused)]
    ignored = [case for case in CASES if isinstance(case.outcome, Ignored)]
    placed = folder_paths([*refused, *ignored])
    place(landing, placed)
    with caplog.at_level(logging.WARNING):
        second = run({**resources, "landing": vanishing(landing, placed)}, instance)

    after = tables(lakehouse)
    # The subject's data did not move; only the control tables recorded the refusals.
    recorders = (control.FILE_STATE, control.EVENTS)
    assert {t: v for t, v in after.items() if t not in recorders} == {
        t: v for t, v in before.items() if t not in recorders
    }
    events = lakehouse.read_arrow(control.EVENTS).to_pylist()
    new_events = {
        (e["source"], e["action"], e["rows_written"])
        for e in events
        if e["dagster_run_id"] == second.run_id
    }
    assert new_events == {(path, "retrying", 0) for path in folder_paths(refused)}
    states = control.file_states(lakehouse)
    assert states[f"telemetry/{SUBJECT}/good.csv"] == good_state
    for case in refused:
        (name,) = case.files
        path = f"telemetry/{SUBJECT}/{name}"
        assert states[path].status == "retrying", case.name
        assert states[path].last_error.startswith(f"{path}{case.outcome.message}"), (
            case.name,
            states[path].last_error,
        )
    assert set(states) == {f"telemetry/{SUBJECT}/good.csv", *folder_paths(refused)}
    warnings = "\n".join(caplog.messages)
    for case in ignored:
        assert f"telemetry/{SUBJECT}/{case.outcome.warning}" in warnings, case.name


def test_tolerated_telemetry_files_are_ingested(lakehouse, landing, instance):
    instance.add_dynamic_partitions(subjects.name, [SUBJECT])
    resources = {
        "lakehouse": lakehouse,
        "landing": landing,
        "telemetry_settings": TelemetrySettings(),
    }
    place(landing, {f"telemetry/{SUBJECT}/good.csv": GOOD})
    accepted = [case for case in CASES if isinstance(case.outcome, Accepted)]
    place(landing, folder_paths(accepted))
    run(resources, instance)
    states = control.file_states(lakehouse)
    assert {path.rsplit("/", 1)[1]: states[path].status for path in folder_paths(accepted)} == {
        "growing.csv": "ingested",  # its complete lines; the rest when it is complete
        "bom.csv": "ingested",
        "header-only.csv": "ingested",
        # Older than the lateness horizon (7 days before the subject's newest data):
        # kept out of the totals until an operator releases it.
        "old.csv": "quarantined",
    }
    raw = lakehouse.read_arrow(control.RAW).to_pylist()
    assert sorted((r["source"].rsplit("/", 1)[1], r["line"]) for r in raw) == [
        ("bom.csv", 2),
        ("bom.csv", 3),
        ("good.csv", 2),
        ("good.csv", 3),
        ("growing.csv", 2),
        ("growing.csv", 3),
    ]
