"""The corpus for visits (`visits/date=YYYY-MM-DD/*.jsonl`), in three range runs of
`visits_daily`: every day with a good file first; then a case file added to each day,
where a refused or ignored case leaves every table as it was; then the accepted cases,
each on a day of its own."""

from __future__ import annotations

import datetime as dt
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
    json_line,
    place,
    tables,
    vanishing,
)
from support import partition_range

from assets.overwriting import visits_daily
from assets.overwriting.data_overwrite import VISITS_DAILY

pytestmark = pytest.mark.parametrize("engine", ["delta-rs"])  # parsing is Spark's, either way

FIRST_DAY = dt.date(2024, 3, 1)


def visit(visit_id: object = "v1", *, day: str = "{day}", **fields) -> dict:
    record = {
        "visit_id": visit_id,
        "user_id": "u1",
        "event_time": f"{day}T10:00:00Z",
        "page": "/home",
    }
    record.update(fields)
    return {k: v for k, v in record.items() if v is not None}


def line(**fields) -> bytes:
    return json_line(**visit(**fields))


GOOD = line(visit_id="good-1") + line(visit_id="good-2", page="/cart")
ODD_KEYS = {
    "quotes": 'it\'s "quoted"',
    "backslash": "C:\\temp\\v",
    "slash": "a/b/c",
    "dot-dot": "../../etc/passwd",
    "spaces": "  spaced  key ",
    "emoji": "visit-🚀-☃",
    "SQL-like": "x'; DROP TABLE visits_daily; --",
}

# Every case's files sit in its own day folder, `{day}`; `{day}` in content is that day.
CASES = [
    Case("empty", "empty file", {"case.jsonl": b""}, Refused("case.jsonl: file is empty")),
    Case(
        "blank lines only",
        "header only",
        {"case.jsonl": b"\n  \n\n"},
        Refused("case.jsonl: file holds no visit, only blank lines"),
    ),
    Case(
        "truncated last line",
        "truncated last line",
        {"case.jsonl": line(visit_id="t1") + b'{"visit_id": "t2", "user_id": "u'},
        Refused("case.jsonl:2: malformed JSON"),
    ),
    Case(
        "not UTF-8",
        "non-UTF-8",
        {"case.jsonl": line(visit_id="n1") + line(visit_id="caf-X").replace(b"-X", b"\xe9")},
        Refused("case.jsonl:2: not valid UTF-8"),
    ),
    Case(
        "missing user_id",
        "missing field",
        {"case.jsonl": line(visit_id="m1", user_id=None)},
        Refused("case.jsonl:1: missing required field 'user_id'"),
    ),
    Case(
        "blank page",
        "missing field",
        {"case.jsonl": line(visit_id="m2", page="  ")},
        Refused("case.jsonl:1: missing required field 'page'"),
    ),
    Case(
        "duplicated field",
        "duplicated field",
        {
            "case.jsonl": b'{"visit_id": "d1", "visit_id": "d2", "user_id": "u1", '
            b'"event_time": "{day}T10:00:00Z", "page": "/"}\n'
        },
        Refused("case.jsonl:1: field 'visit_id' is given twice"),
    ),
    Case(
        "numeric visit_id",
        "wrong type",
        {"case.jsonl": line(visit_id=7)},
        Refused("case.jsonl:1: field 'visit_id' is BIGINT, not text"),
    ),
    Case(
        "context as text",
        "wrong type",
        {"case.jsonl": line(visit_id="w2", context="{oops")},
        Refused("case.jsonl:1: field 'context' is STRING, not a JSON object"),
    ),
    Case(
        "page as list",
        "wrong type",
        {"case.jsonl": line(visit_id="w3", page=["/a"])},
        Refused("case.jsonl:1: field 'page' is ARRAY, not text"),
    ),
    Case(
        "no offset",
        "no offset",
        {"case.jsonl": line(visit_id="o1", event_time="{day}T10:00:00")},
        Refused(
            "case.jsonl:1: event_time '{day}T10:00:00' is not an ISO-8601 instant with its "
            "offset from UTC"
        ),
    ),
    Case(
        "February 30",
        "impossible date",
        {"case.jsonl": line(visit_id="i1", event_time="2024-02-30T10:00:00Z")},
        Refused(
            "case.jsonl:1: event_time '2024-02-30T10:00:00Z' is not an ISO-8601 instant with "
            "its offset from UTC"
        ),
    ),
    Case(
        "year 1900",
        "far past",
        {"case.jsonl": line(visit_id="p1", event_time="1900-01-01T00:00:00Z")},
        Refused("case.jsonl:1: event_time '1900-01-01T00:00:00Z' is not on the folder's day {day}"),
    ),
    Case(
        "year 2999",
        "far future",
        {"case.jsonl": line(visit_id="f1", event_time="2999-01-01T00:00:00Z")},
        Refused("case.jsonl:1: event_time '2999-01-01T00:00:00Z' is not on the folder's day {day}"),
    ),
    Case(
        "plain text",
        "malformed",
        {"case.jsonl": b"visit_id,user_id\nv1,u1\n"},
        Refused("case.jsonl:1: malformed JSON"),
    ),
    Case(
        "colon in the name",
        "odd key",
        {"case:1.jsonl": line(visit_id="c1")},
        Refused("case:1.jsonl: ':' in a file name: rename the file"),
    ),
    Case(
        "vanished",
        "vanished file",
        {"gone.jsonl": VANISHED},
        Refused("gone.jsonl: gone since it was listed"),
    ),
    Case(
        "named pipe",
        "FIFO",
        {"pipe.jsonl": FIFO},
        Ignored("pipe.jsonl skipped: it is a named pipe (FIFO)"),
    ),
    Case(
        "dangling link",
        "dangling symlink",
        {"link.jsonl": DANGLING},
        Ignored("link.jsonl skipped: it is a symbolic link to nothing"),
    ),
    Case(
        "folder named like a file",
        "directory",
        {"folder.jsonl": DIRECTORY},
        Ignored("folder.jsonl skipped: it is a folder"),
    ),
    Case(
        "nested folder",
        "off the layout",
        {"sub/nested.jsonl": line(visit_id="s1")},
        Ignored(""),
    ),
    Case(
        "a writer's temporary file",
        "truncated last line",
        {"_part-0.jsonl.tmp.jsonl": b'{"visit_id": "tmp'},
        Ignored(""),
    ),
    Case(
        "byte-order mark",
        "BOM",
        {"case.jsonl": b"\xef\xbb\xbf" + line(visit_id="b1")},
        Accepted(("b1",)),
    ),
    Case(
        "CRLF line ends",
        "CRLF",
        {"case.jsonl": (line(visit_id="r1") + line(visit_id="r2")).replace(b"\n", b"\r\n")},
        Accepted(("r1", "r2")),
    ),
    Case(
        "unknown fields",
        "extra field",
        {"case.jsonl": line(visit_id="e1", referrer="https://example.com", ab_test=3)},
        Accepted(("e1",)),
    ),
    Case(
        "a 4 MB page",
        "huge line",
        {"case.jsonl": line(visit_id="h1", page="/" + "x" * 4_000_000)},
        Accepted(("h1",)),
    ),
    Case(
        "context as object",
        "wrong type",
        {"case.jsonl": line(visit_id="w4", context={"campaign": "spring", "n": 1})},
        Accepted(("w4",)),
    ),
    *(
        Case(
            f"visit_id with {name}",
            "odd key",
            {f"case {name}.jsonl": line(visit_id=key)},
            Accepted((key,)),
        )
        for name, key in ODD_KEYS.items()
    ),
    Case(
        "an offset other than UTC",
        "no offset",
        {"case.jsonl": line(visit_id="z1", event_time="{day}T10:00:00+05:30")},
        Accepted(("z1",)),
    ),
]


def days_of(cases: list[Case], first: dt.date) -> dict[dt.date, Case]:
    return {first + dt.timedelta(days=i): case for i, case in enumerate(cases)}


def land(landing, day: dt.date, files: dict) -> dict[str, object]:
    """`files` in `day`'s folder, `{day}` in names and content replaced by the day."""
    folder = f"visits/date={day}"
    placed = {
        f"{folder}/{name}": (
            content.replace(b"{day}", str(day).encode()) if isinstance(content, bytes) else content
        )
        for name, content in files.items()
    }
    place(landing, placed)
    return placed


def run_range(resources, instance, days: list[dt.date]) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [visits_daily],
        resources=resources,
        instance=instance,
        tags=partition_range(days[0], days[-1]),
        raise_on_error=False,
    )


def rows(lakehouse) -> dict[str, dt.date]:
    return {r["visit_id"]: r["event_date"] for r in lakehouse.read_arrow(VISITS_DAILY).to_pylist()}


def failed_partitions(result: dg.ExecuteInProcessResult) -> dict[str, str]:
    """A range run's error per failed partition (its Failure's `failed` metadata)."""
    (failure,) = result.get_step_failure_events()
    return failure.step_failure_data.user_failure_data.metadata["failed"].data


def test_refused_and_ignored_visits_change_no_table(
    resources, lakehouse, landing, instance, caplog
):
    cases = {
        day: case
        for day, case in days_of(CASES, FIRST_DAY).items()
        if not isinstance(case.outcome, Accepted)
    }
    days = sorted(cases)
    for day in days:
        land(landing, day, {"good.jsonl": GOOD})
    assert run_range(resources, instance, days).success
    before = tables(lakehouse)

    placed = {}
    for day, case in cases.items():
        placed.update(land(landing, day, case.files))
    with caplog.at_level(logging.WARNING):
        result = run_range({**resources, "landing": vanishing(landing, placed)}, instance, days)

    assert tables(lakehouse) == before
    errors = failed_partitions(result)
    warnings = "\n".join(caplog.messages)
    for day, case in cases.items():
        if isinstance(case.outcome, Refused):
            expected = f"visits/date={day}/" + case.outcome.message.replace("{day}", str(day))
            assert expected in errors.get(str(day), ""), (case.name, errors.get(str(day)))
        else:
            assert str(day) not in errors, (case.name, errors[str(day)])
            if case.outcome.warning:
                assert f"visits/date={day}/{case.outcome.warning}" in warnings, case.name


def test_accepted_visits_land_as_given(resources, lakehouse, landing, instance):
    cases = {
        day: case
        for day, case in days_of(CASES, FIRST_DAY).items()
        if isinstance(case.outcome, Accepted)
    }
    for day, case in cases.items():
        land(landing, day, case.files)
    result = run_range(resources, instance, sorted(cases))
    assert result.success
    assert rows(lakehouse) == {key: day for day, case in cases.items() for key in case.outcome.keys}
