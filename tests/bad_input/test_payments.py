"""The corpus for payments (`payments/date=YYYY-MM-DD/*.jsonl`): a day is refused whole
(nothing of it commits) and every refusal names its file and line."""

from __future__ import annotations

import datetime as dt
import functools
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
    LineCase,
    Refused,
    assert_lines_refused,
    assert_refused,
    clear,
    json_line,
    place,
    tables,
    vanishing,
)

from assets.database import PaymentsSettings, payments
from assets.database.payments import PAYMENTS

pytestmark = pytest.mark.parametrize("engine", ["delta-rs"])  # parsing is Spark's, either way

DAY = dt.date(2024, 3, 1)
FOLDER = f"payments/date={DAY}"


def payment(key: str = "p1", **fields) -> bytes:
    record = {
        "idempotency_key": key,
        "account_id": "acc-1",
        "amount": "12.50",
        "currency": "EUR",
        "created_at": "2024-03-01T10:00:00+01:00",
    }
    record.update(fields)
    return json_line(**{k: v for k, v in record.items() if v is not None})


LINES = [
    LineCase(
        "truncated",
        "truncated last line",
        b'{"idempotency_key": "t", "acc\n',
        Refused("malformed JSON"),
    ),
    LineCase(
        "amount given twice",
        "duplicated field",
        payment("d").replace(b'"amount": "12.50"', b'"amount": "1", "amount": "2"'),
        Refused("field 'amount' is given twice"),
    ),
    LineCase(
        "no account",
        "missing field",
        payment("m", account_id=None),
        Refused("missing required field 'account_id'"),
    ),
    LineCase(
        "amount as a number",
        "wrong type",
        payment("w", amount=12.5),
        Refused("field 'amount' is DECIMAL, not text"),
    ),
    LineCase(
        "33 digits",
        "out-of-range number",
        payment("o", amount="1" * 33),
        Refused(f"amount '{'1' * 33}' is not a decimal with at most 6 decimal places"),
    ),
    LineCase(
        "no offset",
        "no offset",
        payment("n", created_at="2024-03-01T10:00:00"),
        Refused("created_at '2024-03-01T10:00:00' is not ISO-8601 with an offset"),
    ),
    LineCase(
        "February 30",
        "impossible date",
        payment("i", created_at="2024-02-30T10:00:00Z"),
        Refused("created_at '2024-02-30T10:00:00Z' is not ISO-8601 with an offset"),
    ),
    LineCase(
        "not UTF-8",
        "non-UTF-8",
        payment("caf-X").replace(b"-X", b"\xe9"),
        Refused("not valid UTF-8"),
    ),
    LineCase(
        "currency in words",
        "malformed",
        payment("c", currency="euro"),
        Refused("currency 'euro' is not a 3-letter ISO code"),
    ),
]
FILES = [
    Case("empty", "empty file", {"empty.jsonl": b""}, Refused(": file is empty")),
    Case(
        "vanished", "vanished file", {"gone.jsonl": VANISHED}, Refused(": gone since it was listed")
    ),
    Case(
        "a named pipe",
        "FIFO",
        {"pipe.jsonl": FIFO},
        Ignored("pipe.jsonl skipped: it is a named pipe (FIFO)"),
    ),
    Case(
        "a link to nothing",
        "dangling symlink",
        {"link.jsonl": DANGLING},
        Ignored("link.jsonl skipped: it is a symbolic link to nothing"),
    ),
    Case(
        "a folder",
        "directory",
        {"folder.jsonl": DIRECTORY},
        Ignored("folder.jsonl skipped: it is a folder"),
    ),
    Case("a nested folder", "off the layout", {"sub/nested.jsonl": payment("nested")}, Ignored("")),
    Case(
        "BOM, CRLF, odd keys, far dates, unknown fields",
        "odd key",
        {
            "odd.jsonl": (
                b"\xef\xbb\xbf"
                + payment('it\'s "quoted"')
                + payment("C:\\pay\\1")
                + payment("../../etc")
                + payment("pay 🚀", created_at="1970-01-01T00:00:00Z")
                + payment("x'; DROP TABLE payments; --", created_at="2999-12-31T23:59:59-12:00")
                + payment("extra", note="unknown fields are not stored")
            ).replace(b"\n", b"\r\n")
        },
        Accepted(
            (
                'it\'s "quoted"',
                "C:\\pay\\1",
                "../../etc",
                "pay 🚀",
                "x'; DROP TABLE payments; --",
                "extra",
            )
        ),
    ),
]


def run(resources) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [payments],
        partition_key=DAY.isoformat(),
        resources={**resources, "payments_settings": PaymentsSettings()},
        raise_on_error=False,
    )


def test_payments(resources, lakehouse, landing, caplog):
    place(landing, {f"{FOLDER}/good.jsonl": payment("good")})
    assert run(resources).success
    assert_lines_refused(
        lakehouse, landing, f"{FOLDER}/lines.jsonl", b"", LINES, functools.partial(run, resources)
    )
    clear(landing, f"{FOLDER}/lines.jsonl")

    for case in FILES:
        placed = {f"{FOLDER}/{name}": content for name, content in case.files.items()}
        place(landing, placed)
        with_listing = {**resources, "landing": vanishing(landing, placed)}
        if isinstance(case.outcome, Refused):
            (path,) = placed
            assert_refused(
                lakehouse, functools.partial(run, with_listing), [f"{path}{case.outcome.message}"]
            )
        elif isinstance(case.outcome, Ignored):
            before = tables(lakehouse)
            with caplog.at_level(logging.WARNING):
                assert run(with_listing).success, case.name
            assert tables(lakehouse) == before, case.name
            assert case.outcome.warning in "\n".join(caplog.messages), case.name
        else:
            assert run(with_listing).success, case.name
            keys = {r["idempotency_key"] for r in lakehouse.read_arrow(PAYMENTS).to_pylist()}
            assert keys == {"good", *case.outcome.keys}
        for path in placed:
            clear(landing, path)
