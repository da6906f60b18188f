"""The corpus for the two daily change files: `devices_cdc/YYYY-MM-DD.csv` (devices, the
Merger) and `device_catalog/YYYY-MM-DD.jsonl` (device_catalog, the Stateful Merger).

A day is one file, so a day's run is one case, except the line cases: those share one
file and one run names each at its line."""

from __future__ import annotations

import datetime as dt
import functools

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
    failure_text,
    in_place_of_the_file,
    json_line,
    place,
)

from assets.updates import device_catalog, devices
from assets.updates.merger import DEVICES
from assets.updates.stateful_merger import DEVICE_CATALOG

pytestmark = pytest.mark.parametrize("engine", ["delta-rs"])  # parsing is Spark's, either way

BASE_DAY = dt.date(2024, 5, 1)
HEADER = b"type;full_name;version;is_deleted\n"
ODD_KEYS = (
    'it\'s "quoted"',
    "C:\\devices\\x",
    "a/b/../c",
    "  spaced  ",
    "phone-📱",
    "x' OR '1'='1",  # no ';': it is the delimiter, and the format has no quoting
)

DEVICE_LINES = [
    LineCase(
        "truncated last line",
        "truncated last line",
        b"phone;Pix\n",
        Refused("expected 4 ';'-separated fields, found 2"),
    ),
    LineCase(
        "an extra field",
        "extra field",
        b"phone;Pixel;9;false;blue\n",
        Refused("expected 4 ';'-separated fields, found 5"),
    ),
    LineCase(
        "an empty full_name",
        "missing field",
        b"phone;;9;false\n",
        Refused("missing required field 'full_name'"),
    ),
    LineCase(
        "is_deleted as yes",
        "wrong type",
        b"phone;Pixel;9;yes\n",
        Refused("is_deleted must be true or false, not 'yes'"),
    ),
    LineCase("not UTF-8", "non-UTF-8", b"phone;Caf\xe9;9;false\n", Refused("not valid UTF-8")),
    LineCase(
        "the header again",
        "duplicated field",
        HEADER,
        Refused("the header line again: a header belongs on line 1 only"),
    ),
    LineCase(
        "comma-separated",
        "malformed",
        b"phone,Pixel,9,false\n",
        Refused("expected 4 ';'-separated fields, found 1"),
    ),
]
DEVICE_FILES = [
    Case(
        "a header without version",
        "missing field",
        {"f": b"type;full_name;is_deleted\nphone;Pixel;false\n"},
        Refused(
            ":1: header 'type;full_name;is_deleted' is not type;full_name;version or "
            "type;full_name;version;is_deleted"
        ),
    ),
    Case(
        "a header with an extra column",
        "extra field",
        {"f": b"type;full_name;version;is_deleted;colour\nphone;Pixel;9;false;blue\n"},
        Refused(":1: header 'type;full_name;version;is_deleted;colour' is not"),
    ),
    Case(
        "a header naming version twice",
        "duplicated field",
        {"f": b"type;full_name;version;version\nphone;Pixel;9;9\n"},
        Refused(":1: header 'type;full_name;version;version' is not"),
    ),
    Case(
        "comma-delimited",
        "malformed",
        {"f": b"type,full_name,version\nphone,Pixel,9\n"},
        Refused(
            ":1: header 'type,full_name,version' is not type;full_name;version or "
            "type;full_name;version;is_deleted (is the file ';'-delimited?)"
        ),
    ),
    *in_place_of_the_file(": change file has not landed"),
    Case("empty", "empty file", {"f": b""}, Accepted()),
    Case("header only", "header only", {"f": HEADER}, Accepted()),
    Case(
        "BOM and CRLF",
        "BOM",
        {"f": (b"\xef\xbb\xbf" + HEADER + b"phone;Pixel 9;9;false\n").replace(b"\n", b"\r\n")},
        Accepted(("phone/9",)),
    ),
    Case(
        "odd keys, a long name",
        "odd key",
        {
            "f": HEADER
            + "".join(f"{key};Device {i};{i};false\n" for i, key in enumerate(ODD_KEYS)).encode()
            + b"tablet;"
            + b"T" * 2_000_000
            + b";1;false\n"
        },
        Accepted((*(f"{key.strip()}/{i}" for i, key in enumerate(ODD_KEYS)), "tablet/1")),
    ),
]

CATALOG_LINES = [
    LineCase(
        "truncated", "truncated last line", b'{"id": "t1", "full_na\n', Refused("malformed JSON")
    ),
    LineCase(
        "id given twice",
        "duplicated field",
        b'{"id": "a", "id": "b", "full_name": "F"}\n',
        Refused("field 'id' is given twice"),
    ),
    LineCase(
        "no full_name",
        "missing field",
        json_line(id="m1", brand_name="B"),
        Refused("missing required field 'full_name'"),
    ),
    LineCase(
        "numeric id",
        "wrong type",
        json_line(id=7, full_name="F"),
        Refused("field 'id' is BIGINT, not text"),
    ),
    LineCase(
        "brand as object",
        "wrong type",
        json_line(id="w2", full_name="F", brand_name={"a": 1}),
        Refused("field 'brand_name' is OBJECT, not text"),
    ),
    LineCase(
        "a 20-digit number",
        "out-of-range number",
        b'{"id": 99999999999999999999, "full_name": "F"}\n',
        Refused("field 'id' is DECIMAL, not text"),
    ),
    LineCase(
        "not UTF-8",
        "non-UTF-8",
        b'{"id": "caf\xe9", "full_name": "F"}\n',
        Refused("not valid UTF-8"),
    ),
    LineCase("an array", "malformed", b'["a", "b"]\n', Refused("malformed JSON")),
]
CATALOG_FILES = [
    *in_place_of_the_file(": change file has not landed"),
    Case("empty", "empty file", {"f": b""}, Accepted()),
    Case("blank lines only", "header only", {"f": b"\n\n"}, Accepted()),
    Case(
        "BOM, CRLF, extra fields, odd ids, a long name",
        "extra field",
        {
            "f": (
                b"\xef\xbb\xbf"
                + b"".join(
                    json_line(id=key, full_name=f"Device {key}", colour="red") for key in ODD_KEYS
                )
                + json_line(id="long", full_name="L" * 2_000_000)
            ).replace(b"\n", b"\r\n")
        },
        Accepted((*ODD_KEYS, "long")),
    ),
]


class Source:
    """One daily change-file source: its asset, its file, its keys."""

    def __init__(self, asset, table: str, folder: str, suffix: str) -> None:
        self.asset, self.table, self.folder, self.suffix = asset, table, folder, suffix

    def path(self, day: dt.date) -> str:
        return f"{self.folder}/{day.isoformat()}{self.suffix}"

    def run(self, resources, day: dt.date) -> dg.ExecuteInProcessResult:
        return dg.materialize(
            [self.asset], partition_key=day.isoformat(), resources=resources, raise_on_error=False
        )

    def keys(self, lakehouse) -> set[str]:
        rows = lakehouse.read_arrow(self.table).to_pylist()
        if self.table == DEVICES:
            return {f"{r['type']}/{r['version']}" for r in rows}
        return {r["id"] for r in rows}


DEVICES_SOURCE = Source(devices, DEVICES, "devices_cdc", ".csv")
CATALOG_SOURCE = Source(device_catalog, DEVICE_CATALOG, "device_catalog", ".jsonl")
GOOD = {
    DEVICES: HEADER + b"phone;Pixel 8;8;false\n",
    DEVICE_CATALOG: json_line(id="base", full_name="Base device"),
}


@pytest.mark.parametrize(
    ("source", "line_cases", "file_cases"),
    [
        pytest.param(DEVICES_SOURCE, DEVICE_LINES, DEVICE_FILES, id="devices"),
        pytest.param(CATALOG_SOURCE, CATALOG_LINES, CATALOG_FILES, id="device_catalog"),
    ],
)
def test_change_files(resources, lakehouse, landing, source, line_cases, file_cases):
    place(landing, {source.path(BASE_DAY): GOOD[source.table]})
    assert source.run(resources, BASE_DAY).success
    keys = source.keys(lakehouse)
    day = BASE_DAY + dt.timedelta(days=1)

    # The line cases, in one file after a good line: one run names every one.
    assert_lines_refused(
        lakehouse,
        landing,
        source.path(day),
        GOOD[source.table],
        line_cases,
        functools.partial(source.run, resources, day),
    )

    # File cases: refusals on the same day, never committed; each acceptance on a day
    # of its own after them, as days arrive.
    for case in sorted(file_cases, key=lambda c: isinstance(c.outcome, Accepted)):
        target = source.path(day)
        clear(landing, target)
        if "f" in case.files:
            place(landing, {target: case.files["f"]})
        if isinstance(case.outcome, Refused):
            run = functools.partial(source.run, resources, day)
            assert_refused(lakehouse, run, [f"{target}{case.outcome.message}"])
        else:
            result = source.run(resources, day)
            assert result.success, (case.name, failure_text(result))
            keys |= set(case.outcome.keys)
            assert source.keys(lakehouse) == keys, case.name
            day += dt.timedelta(days=1)
