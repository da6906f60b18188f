"""The native library (`native_events`) reads an event line as Spark reads it, to the
byte, or leaves the line to Spark: checked line by line against Spark's own reading
(`events_source._by_spark`), on hand-picked lines and on generated ones. It splits,
numbers and hashes a file as `read_lines` (Spark's text source) does, wherever the file
is cut into pieces, and refuses a file that changed or went while it was read."""

import datetime as dt
import hashlib
import json
import random

import pytest
from event_lines import pieces
from event_lines.pieces import READ
from pyspark.sql import functions as F

from assets.source_files import SourceDataError, checked_facts, read_lines
from assets.warehouse import native_events
from assets.warehouse.events_source import EVENT_COLUMNS, _by_spark, parse_batch
from assets.warehouse.native_events import read_files

BATCH = "b1"


def event(**fields) -> dict:
    return {
        "event_timestamp": "2024-05-01T10:00:00+02:00",
        "ingestion_time": "2024-05-02T00:00:00Z",
        "user_id": "u1",
        "payload": {"page": "/"},
        **fields,
    }


def line(**fields) -> str:
    return json.dumps({k: v for k, v in event(**fields).items() if v is not ...})


class Raw(str):
    """JSON text put into a line as it is."""


def spelled(fields: dict) -> str:
    """A line whose values are JSON, or `Raw` JSON text written as it is."""
    parts = [
        f"{json.dumps(k)}: {v if isinstance(v, Raw) else json.dumps(v)}" for k, v in fields.items()
    ]
    return "{" + ", ".join(parts) + "}"


READ_HERE = [
    line(),
    line(event_id="e1", op="delete"),
    line(event_id=None, op=None),
    line(user_id='"quoted" \\ and \u00e9 \U0001f600 \x00 \x1f \x7f /'),
    line(
        event_timestamp="1999-12-31T23:59:59.123456-05:30", ingestion_time="2024-02-29T00:00:00.5Z"
    ),
    line(event_timestamp="1000-01-01T00:00:00Z"),
    line(event_timestamp="9999-12-31T23:59:59.999999+17:59"),
    line(payload={"b": [1, {"z": None, "y": True}], "a": "\t", "\uffff": 1, "\U0001f600": 2}),
    spelled(
        event(payload=Raw('{"n": -0, "d": 2.50, "z": -0.0, "h": 100.00, "i": 9223372036854775808}'))
    ),
    spelled(event(payload=Raw('{"p": 0.12345678901234567890123456789012345678}'))),
    spelled(event(user_id=Raw('"\\u00e9\\ud83d\\ude00\\/\\u0041"'))),
    ' { "user_id" : "u1" , "event_timestamp" : "2024-05-01T10:00:00Z" , "ingestion_time" : '
    '"2024-05-01T10:00:00Z" , "payload" : { } } ',
]
LEFT_TO_SPARK = [
    spelled(event(payload=Raw('{"n": 1e2}'))),  # a double: Java's Double.toString writes it
    spelled(event(payload=Raw('{"n": 123456789012345678901234567890123456789}'))),
    spelled(event(payload=Raw('{"s": "\\ud800"}'))),  # a lone surrogate: Spark writes "?"
    spelled(event(payload=Raw('{"x": 1, "x": 2}'))),  # a key twice
    line() + " trailing",  # Spark reads the object and ignores the rest
    spelled(event(payload=Raw("[" * 70 + "]" * 70))),  # deeper than the library goes
    line(event_timestamp="2024-05-01 10:00:00Z"),  # spellings Spark reads too
    line(event_timestamp="2024-05-01T10:00:00+0200"),
    line(event_timestamp="2024-05-01T10:00:00.1234567Z"),
    line(event_timestamp="0999-05-01T10:00:00Z"),
    # Problems, which Spark names:
    line(event_timestamp="2024-05-01T10:00:00"),
    line(ingestion_time="2024-02-30T00:00:00Z"),
    line(user_id=" "),
    line(user_id=7),
    line(user_id=...),
    line(event_id=""),
    line(event_id=1),
    line(op="merge"),
    line(payload="{}"),
    line(payload=None),
    line(payload=...),
    "[1, 2]",
    "{'a': 1}",
]


def readings(spark, landing, lines: list[str]) -> list[tuple[dict, dict]]:
    """Each line's reading by the library and by Spark, from one file of the lines."""
    path = "events/b1.jsonl"
    landing.absolute("events").mkdir(exist_ok=True)
    landing.absolute(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    stat = landing.stat(path)
    natively = read_files(spark.session(), landing, [stat]).lines.orderBy("source_line")
    by_spark = _by_spark(read_lines(spark.session(), landing, [stat]), BATCH)
    return [
        (native.asDict(), spark_row.asDict())
        for native, spark_row in zip(
            natively.collect(), by_spark.orderBy("source_line").collect(), strict=True
        )
    ]


def compare(spark, landing, lines: list[str]) -> list[int]:
    """The lines left to Spark; each line read natively is checked against Spark's."""
    left = []
    for n, (native, by_spark) in enumerate(readings(spark, landing, lines)):
        if not native[READ]:
            assert native["text"] == lines[n]
            assert all(native[column] is None for column in EVENT_COLUMNS if column != "batch_id")
            left.append(n)
            continue
        assert native["text"] is None
        assert by_spark["problem"] is None, (lines[n], by_spark["problem"])
        for column in EVENT_COLUMNS:
            if column != "batch_id":
                assert native[column] == by_spark[column], (lines[n], column)
    return left


def test_the_library_reads_events_as_spark_does(spark, landing):
    assert compare(spark, landing, READ_HERE) == []


def test_what_the_library_cannot_reproduce_or_refuses_is_left_to_spark(spark, landing):
    assert compare(spark, landing, LEFT_TO_SPARK) == list(range(len(LEFT_TO_SPARK)))


CHARACTERS = ['"', "\\", "/", "\x00", "\x1f", "\x7f", "\t", " ", "é", "😀", "\uffff", "\ue000", "a"]


def text(rng: random.Random, most: int = 6) -> str:
    return "".join(rng.choice(CHARACTERS) for _ in range(rng.randrange(most)))


def value(rng: random.Random, depth: int = 0):
    """A JSON value as `Raw` text: numbers spelled as senders spell them."""
    choice = rng.randrange(9 if depth < 4 else 6)
    if choice == 0:
        return Raw(rng.choice(["null", "true", "false"]))
    if choice == 1:
        n = rng.choice(
            [0, -1, 2**63 - 1, -(2**63), 2**63, -(2**70), 10**37, rng.randrange(-999, 999)]
        )
        return Raw(str(n))
    if choice == 2:  # a decimal, with the zeros a sender may give it
        digits = str(rng.randrange(10 ** rng.randrange(1, 30))).zfill(rng.randrange(1, 12))
        point = rng.randrange(1, len(digits) + 1)
        integer = digits[:point].lstrip("0") or "0"
        return Raw(f"{rng.choice(['', '-'])}{integer}.{digits[point:] or '0'}")
    if choice in (3, 4, 5):
        return Raw(json.dumps(text(rng), ensure_ascii=rng.random() < 0.5))
    if choice in (6, 7):
        keys = {text(rng, 3) for _ in range(4)}
        parts = [
            f"{json.dumps(k, ensure_ascii=rng.random() < 0.5)}:{value(rng, depth + 1)}"
            for k in keys
        ]
        return Raw("{" + rng.choice([",", " , "]).join(parts) + "}")
    return Raw("[" + ",".join(value(rng, depth + 1) for _ in range(rng.randrange(4))) + "]")


def instant(rng: random.Random) -> str:
    at = dt.datetime(1970, 1, 1) + dt.timedelta(seconds=rng.randrange(0, 3 * 10**9))
    fraction = rng.choice(["", "." + "7" * rng.randrange(1, 7)])
    offset = rng.choice(["Z", "+00:00", "-05:30", "+14:00", "+02:00"])
    return at.strftime("%Y-%m-%dT%H:%M:%S") + fraction + offset


@pytest.mark.parametrize("seed", [1, 2])
def test_generated_events_read_natively_are_read_as_spark_reads_them(spark, landing, seed):
    rng = random.Random(seed)
    lines = []
    for _ in range(1500):
        fields = {
            "user_id": Raw(json.dumps(text(rng, 8) + "u", ensure_ascii=rng.random() < 0.5)),
            "event_timestamp": instant(rng),
            "ingestion_time": instant(rng),
            "payload": value(rng, 1)
            if rng.random() < 0.1
            else Raw(
                "{"
                + ",".join(
                    f"{json.dumps(k)}:{value(rng, 1)}" for k in {text(rng, 3) for _ in range(3)}
                )
                + "}"
            ),
        }
        if rng.random() < 0.5:
            fields["event_id"] = Raw(json.dumps(text(rng, 8) + "e"))
        if rng.random() < 0.3:
            fields["op"] = rng.choice(["upsert", "delete"])
        lines.append(spelled(dict(rng.sample(list(fields.items()), len(fields)))))
    left = compare(spark, landing, lines)
    # A generated line is left when its payload is not an object (a tenth of them) or
    # names a key twice; the rest, over 1,200 events, are held to Spark's reading.
    assert len(left) < 0.2 * len(lines), [lines[n] for n in left[:3]]


LINES_FILE = b"\xef\xbb\xbf" + b"\n".join(
    [
        line(event_id="bom").encode(),
        line(event_id="crlf").encode() + b"\r",
        b" \t\x0b\x0c\r",  # blank, its "\r" ending included
        b"",
        b"lone\rcarriage return",
        line(event_id="caf?").encode().replace(b"?", b"\xe9"),  # not UTF-8
        "\u00a0".encode(),  # no whitespace of Java's \s: a line Spark names
    ]
)


def test_pieces_hold_every_line_once_wherever_the_file_is_cut(tmp_path, monkeypatch):
    monkeypatch.setattr(pieces, "CHUNK_BYTES", 7)
    path = tmp_path / "f.jsonl"
    for content in (LINES_FILE, LINES_FILE + b"\n", LINES_FILE + b"\n\n"):
        path.write_bytes(content)
        for piece in range(1, len(content) + 1):
            read = b""
            for start in range(0, len(content), piece):
                with path.open("rb") as file:
                    chunks = list(
                        pieces._lines_of_piece(file, start, min(start + piece, len(content)))
                    )
                assert all(bytes(chunk).endswith(b"\n") for chunk in chunks[:-1])
                read += b"".join(chunks)
            assert read == content[3:], piece  # the byte-order mark dropped


def test_lines_are_numbered_and_hashed_as_read_lines_does(spark, landing, monkeypatch):
    """Pieces of 1 MiB, cut inside a "\\r\\n", right after a line feed and inside a line;
    against `read_lines` (Spark's text source): the same lines, numbers, texts, problems
    and fingerprints."""
    megabyte = 1 << 20
    monkeypatch.setattr(native_events, "MIN_PIECE_BYTES", megabyte)
    monkeypatch.setattr(native_events, "MAX_PIECE_BYTES", megabyte)
    content = bytearray(LINES_FILE + b"\n")
    # A line's "\n" on a piece's first byte (its "\r" on the one before), on the last
    # byte before a piece, and on the second byte of a piece.
    for piece, beyond in ((1, 1), (2, 0), (3, 2)):
        ends = piece * megabyte + beyond
        while len(content) < ends - 1000:
            content += line(event_id=f"f{len(content)}").encode() + b"\n"
        content += b'"' + b"x" * (ends - len(content) - 4) + b'"\r\n'
        assert len(content) == ends
    content += b"\n\n" + LINES_FILE  # ends without a line feed
    path = "events/b1.jsonl"
    landing.absolute("events").mkdir()
    landing.absolute(path).write_bytes(content)
    (stat,) = files = [landing.stat(path)]
    read = read_files(spark.session(), landing, files)
    by_spark = read_lines(spark.session(), landing, files)
    columns = ("source_file", "source_line", "text", "read_problem")
    natively = read.lines.select(*columns, READ).orderBy("source_line").collect()
    expected = by_spark.select(*columns).orderBy("source_line").collect()
    assert len(natively) == len(expected) == read.lines_read > 3 * 5000
    for native, spark_row in zip(natively, expected, strict=True):
        assert native.source_line == spark_row.source_line
        assert native.read_problem == spark_row.read_problem
        if native[READ] or native.read_problem:
            assert native.text is None
        else:
            assert native.text == spark_row.text
    # Left to Spark: three lines of LINES_FILE that are no events, twice, its line after
    # the byte-order mark that no longer opens the file, and the three "x" lines.
    assert read.left == 10
    assert read.fingerprints == checked_facts("events", by_spark, F.lit(None), files).fingerprints
    assert read.fingerprints[0].sha256 == hashlib.sha256(content).hexdigest()
    assert read.fingerprints[0].size == stat.size


def test_a_file_changed_gone_unreadable_or_without_events_is_refused_by_name(spark, landing):
    path = "events/b1.jsonl"
    landing.absolute("events").mkdir()
    landing.absolute(path).write_text(line() + "\n")
    listed = [landing.stat(path)]
    with landing.absolute(path).open("a") as file:
        file.write(line(event_id="late") + "\n")
    with pytest.raises(SourceDataError, match=r"events/b1.jsonl: changed while it was read"):
        read_files(spark.session(), landing, listed)
    listed = [landing.stat(path)]
    landing.absolute(path).unlink()
    with pytest.raises(SourceDataError, match=r"events/b1.jsonl: gone since it was listed"):
        read_files(spark.session(), landing, listed)
    landing.absolute(path).mkdir()  # listed as a file, found a folder
    with pytest.raises(SourceDataError, match=r"events/b1.jsonl: cannot be read: Is a directory"):
        read_files(spark.session(), landing, listed)
    landing.absolute(path).rmdir()
    landing.absolute(path).write_bytes(b" \n\r\n\t\n")
    with pytest.raises(SourceDataError, match=r"events/b1.jsonl: file holds no event"):
        parse_batch(spark.session(), landing, "b1", [landing.stat(path)])
