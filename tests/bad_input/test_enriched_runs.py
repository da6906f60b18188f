"""The corpus for enriched runs (`enriched/run=<id>/*`, the load manifest): a bad line
refuses its run before anything is staged, and the manifest, the stage and the warehouse
tables stay as they were."""

from __future__ import annotations

import functools
import logging

import dagster as dg
import pytest
from bad_input.corpus import (
    DANGLING,
    FIFO,
    Case,
    Ignored,
    LineCase,
    Refused,
    assert_lines_refused,
    assert_refused,
    json_line,
    place,
)

from assets.warehouse import ManifestSettings, enriched_runs, shredded_events, warehouse_events
from assets.warehouse.manifest import load_manifest as manifest
from assets.warehouse.manifest.enriched import SUCCESS, run_folder
from assets.warehouse.manifest.loader import warehouse_table

pytestmark = pytest.mark.parametrize("engine", ["delta-rs"])  # parsing is Spark's, either way

GOOD_RUN, BAD_RUN = "2024-05-01-10-00-00", "2024-05-01-11-00-00"


def page_view(event_id: object = "p1", **fields) -> bytes:
    record = {
        "event_type": "page_view",
        "event_id": event_id,
        "user_id": "u1",
        "event_timestamp": "2024-05-01T09:59:00+02:00",
        "page_url": "/home",
        "referrer": None,
    }
    record.update(fields)
    return json_line(**record)


LINES = [
    LineCase(
        "truncated", "truncated last line", b'{"event_type": "page_vi\n', Refused("malformed JSON")
    ),
    LineCase(
        "event_id given twice",
        "duplicated field",
        page_view("d").replace(b'"event_id": "d"', b'"event_id": "d", "event_id": "e"'),
        Refused("field 'event_id' is given twice"),
    ),
    LineCase(
        "no event_type",
        "missing field",
        json_line(event_id="m"),
        Refused("missing required field 'event_type'"),
    ),
    LineCase(
        "numeric event_id",
        "wrong type",
        page_view(7),
        Refused("field 'event_id' is BIGINT, not text"),
    ),
    LineCase(
        "a 20-digit event_id",
        "out-of-range number",
        page_view(99999999999999999999),
        Refused("field 'event_id' is DECIMAL, not text"),
    ),
    LineCase(
        "a type with a path",
        "odd key",
        page_view("x", event_type="../x"),
        Refused("event_type '../x' is not a name of lower-case letters, digits and '_'"),
    ),
    LineCase(
        "a type with SQL",
        "odd key",
        page_view("y", event_type="x; DROP TABLE t"),
        Refused("event_type 'x; DROP TABLE t' is not a name of lower-case letters, digits and '_'"),
    ),
    LineCase(
        "not UTF-8",
        "non-UTF-8",
        page_view("caf-X").replace(b"-X", b"\xe9"),
        Refused("not valid UTF-8"),
    ),
    LineCase("an array", "malformed", b"[1, 2]\n", Refused("line is not a JSON object")),
]
FILES = [
    Case("empty", "empty file", {"a.json": b""}, Refused("/a.json: file is empty")),
    Case("no event file", "header only", {}, Refused(": run directory holds no event file")),
    Case(
        "a named pipe",
        "FIFO",
        {"pipe.json": FIFO, "a.json": page_view("f")},
        Ignored("pipe.json skipped: it is a named pipe (FIFO)"),
    ),
    Case(
        "a link to nothing",
        "dangling symlink",
        {"link.json": DANGLING, "a.json": page_view("l")},
        Ignored("link.json skipped: it is a symbolic link to nothing"),
    ),
    Case(
        "a folder and a nested file",
        "directory",
        {"sub/nested.json": page_view("n"), "a.json": page_view("s")},
        Ignored(""),
    ),
]


def run(resources, instance, run_id: str) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [shredded_events, warehouse_events],
        partition_key=run_id,
        resources={**resources, "manifest_settings": ManifestSettings()},
        instance=instance,
        raise_on_error=False,
    )


def finished(run_id: str, files: dict) -> dict:
    return {f"{run_folder(run_id)}/{name}": content for name, content in files.items()} | {
        f"{run_folder(run_id)}/{SUCCESS}": b""
    }


def test_enriched_runs(resources, lakehouse, landing, instance, caplog):
    file_runs = [f"2024-05-01-12-00-{i:02d}" for i in range(len(FILES))]
    instance.add_dynamic_partitions(enriched_runs.name, [GOOD_RUN, BAD_RUN, *file_runs])
    place(landing, finished(GOOD_RUN, {"a.json": page_view("good")}))
    assert run(resources, instance, GOOD_RUN).success
    # Registered as NEW, as the sensor registers finished run directories.
    manifest.add(lakehouse, [BAD_RUN, *file_runs], by="enriched_run_directories", metadata={})
    place(landing, finished(BAD_RUN, {}))
    path = f"{run_folder(BAD_RUN)}/lines.json"
    refuse = functools.partial(run, resources, instance, BAD_RUN)
    assert_lines_refused(lakehouse, landing, path, page_view("ok"), LINES, refuse)

    for case, run_id in zip(FILES, file_runs, strict=True):
        place(landing, finished(run_id, case.files))
        if isinstance(case.outcome, Refused):
            refuse = functools.partial(run, resources, instance, run_id)
            assert_refused(lakehouse, refuse, [f"{run_folder(run_id)}{case.outcome.message}"])
            continue
        # Ignored: the run loads its good file alone, and names what it left out.
        with caplog.at_level(logging.WARNING):
            assert run(resources, instance, run_id).success, case.name
        assert case.outcome.warning in "\n".join(caplog.messages), case.name
    loaded = lakehouse.read_arrow(warehouse_table("page_view")).to_pylist()
    assert sorted(r["event_id"] for r in loaded) == ["f", "good", "l", "s"]
