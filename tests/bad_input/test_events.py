"""The corpus for event batches (`events/<batch_id>.jsonl`, write-audit-publish): a bad
line refuses the batch before anything is staged; an event time out of bounds is staged,
fails its audit and never reaches `user_events`."""

from __future__ import annotations

import functools
import json

import dagster as dg
import pytest
from bad_input.corpus import (
    Accepted,
    Case,
    LineCase,
    Refused,
    assert_lines_refused,
    assert_refused,
    clear,
    in_place_of_the_file,
    json_line,
    place,
    tables,
)

from assets.warehouse import EventSettings, event_batches, user_events, user_events_staging
from assets.warehouse.events_source import batch_file
from assets.warehouse.staging_merge import USER_EVENTS
from assets.warehouse.user_events import STAGING, TIMES_CHECK

pytestmark = pytest.mark.parametrize("engine", ["delta-rs"])  # parsing is Spark's, either way

BATCH = "batch-1"


def event(event_id: object = "e1", **fields) -> bytes:
    record = {
        "event_id": event_id,
        "event_timestamp": "2024-05-01T10:00:00+00:00",
        "ingestion_time": "2024-05-02T00:00:00+00:00",
        "user_id": "u1",
        "payload": {"page": "/"},
    }
    record.update(fields)
    return json_line(**{k: v for k, v in record.items() if v is not None})


LINES = [
    LineCase(
        "truncated", "truncated last line", b'{"event_id": "t", "us\n', Refused("malformed JSON")
    ),
    LineCase(
        "user_id given twice",
        "duplicated field",
        event("d").replace(b'"user_id": "u1"', b'"user_id": "u1", "user_id": "u2"'),
        Refused("field 'user_id' is given twice"),
    ),
    LineCase(
        "no user",
        "missing field",
        event("m", user_id=None),
        Refused("missing required field 'user_id'"),
    ),
    LineCase(
        "numeric user",
        "wrong type",
        event("w", user_id=7),
        Refused("field 'user_id' is BIGINT, not text"),
    ),
    LineCase(
        "payload as text",
        "wrong type",
        event("p", payload="{oops"),
        Refused("field 'payload' is STRING, not a JSON object"),
    ),
    LineCase(
        "a 20-digit event_id",
        "out-of-range number",
        event(99999999999999999999),
        Refused("field 'event_id' is DECIMAL, not text"),
    ),
    LineCase(
        "no offset",
        "no offset",
        event("n", event_timestamp="2024-05-01T10:00:00"),
        Refused("event_timestamp '2024-05-01T10:00:00' is not ISO-8601 with an offset"),
    ),
    LineCase(
        "February 30",
        "impossible date",
        event("i", ingestion_time="2024-02-30T00:00:00Z"),
        Refused("ingestion_time '2024-02-30T00:00:00Z' is not ISO-8601 with an offset"),
    ),
    LineCase(
        "not UTF-8", "non-UTF-8", event("caf-X").replace(b"-X", b"\xe9"), Refused("not valid UTF-8")
    ),
    LineCase("an array", "malformed", b"[1, 2]\n", Refused("line is not a JSON object")),
]
FILES = [
    Case("empty", "empty file", {"f": b""}, Refused(": file is empty")),
    *in_place_of_the_file(" is not in the landing zone"),
]


def run(resources, instance) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [user_events_staging, user_events],
        partition_key=BATCH,
        resources={**resources, "event_settings": EventSettings()},
        instance=instance,
        raise_on_error=False,
    )


def test_event_batches(resources, lakehouse, landing, instance):
    instance.add_dynamic_partitions(event_batches.name, [BATCH])
    refuse = functools.partial(run, resources, instance)
    assert_lines_refused(lakehouse, landing, batch_file(BATCH), event("good"), LINES, refuse)

    for case in FILES:
        clear(landing, batch_file(BATCH))
        if "f" in case.files:
            place(landing, {batch_file(BATCH): case.files["f"]})
        assert_refused(lakehouse, refuse, [f"{batch_file(BATCH)}{case.outcome.message}"])


OUT_OF_BOUNDS = [
    LineCase(
        "year 1900", "far past", event("old", event_timestamp="1900-01-01T00:00:00Z"), Accepted()
    ),
    LineCase(
        "year 2999", "far future", event("new", event_timestamp="2999-01-01T00:00:00Z"), Accepted()
    ),
]
"""Well-formed, so staged; the audit of event times fails, so never published."""


@pytest.mark.parametrize("case", OUT_OF_BOUNDS, ids=lambda case: case.name)
def test_an_event_time_out_of_bounds_is_staged_and_never_published(
    resources, lakehouse, landing, instance, case
):
    instance.add_dynamic_partitions(event_batches.name, [BATCH])
    place(landing, {batch_file(BATCH): event("ok") + case.line})
    before = tables(lakehouse)
    result = run(resources, instance)
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks[TIMES_CHECK] is False
    assert not lakehouse.exists(USER_EVENTS) and USER_EVENTS not in before
    staged = lakehouse.read_arrow(STAGING).to_pylist()
    assert sorted(json.loads(r["payload"])["page"] for r in staged) == ["/", "/"]
