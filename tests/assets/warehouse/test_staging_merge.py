"""Staging -> dedup -> MERGE into `user_events`, on both engines: one order decides every
version, tombstones never let an older upsert back, and any order of batches, replayed
any number of times, gives one table."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F

from assets.source_files import SourceDataError
from assets.warehouse import key_index
from assets.warehouse.events_source import batch_file, parse_batch
from assets.warehouse.key_index import KEY_INDEX
from assets.warehouse.staging_merge import (
    PUBLISH,
    TABLE_SCHEMA,
    USER_EVENTS,
    OneRowPerKey,
    deduplicate,
    merge_batch,
)
from resources.lakehouse import AppTransaction
from resources.lakehouse.frames import frame_from_arrow

T0 = "2024-05-01T10:00:00+00:00"
T1 = "2024-05-01T11:00:00+00:00"
T2 = "2024-05-02T09:00:00+00:00"
SEEN1 = "2024-05-03T00:00:00+00:00"
SEEN2 = "2024-05-04T00:00:00+00:00"


def event(payload: dict | None = None, *, ts: str = T0, seen: str = SEEN1, **fields) -> dict:
    return {
        "event_timestamp": ts,
        "ingestion_time": seen,
        "user_id": fields.pop("user_id", "u1"),
        "payload": {"page": "/home"} if payload is None else payload,
        **fields,
    }


@pytest.fixture
def write_batch(landing):
    def write(batch_id: str, rows: list[dict] | str) -> str:
        path = Path(landing.root) / batch_file(batch_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = rows if isinstance(rows, str) else "".join(json.dumps(r) + "\n" for r in rows)
        path.write_text(text)
        return batch_id

    return write


@pytest.fixture
def stage(spark, landing):
    def parse(batch_id: str):
        return parse_batch(spark.session(), landing, batch_id, landing.stat(batch_file(batch_id)))

    return parse


@pytest.fixture
def apply(lakehouse, stage):
    def run(batch_id: str):
        staged = deduplicate(stage(batch_id).frame)
        return merge_batch(lakehouse, staged, metadata={"batch_id": batch_id})

    return run


def every_column(lakehouse) -> list[dict]:
    return sorted(lakehouse.read_arrow(USER_EVENTS).to_pylist(), key=lambda r: r["event_id"])


def derived_key(user_id: str, payload: str, instant: str = "2024-05-01T10:00:00.000000Z") -> str:
    identity = {"user_id": user_id, "event_timestamp": instant, "payload": payload}
    return hashlib.sha256(json.dumps(identity, separators=(",", ":")).encode()).hexdigest()


def table(lakehouse) -> list[tuple]:
    rows = lakehouse.read_arrow(USER_EVENTS).to_pylist()
    return sorted(
        (r["event_id"], r["payload"], r["is_deleted"], r["ingestion_time"].isoformat())
        for r in rows
    )


def test_a_derived_key_is_the_documented_hash_and_ignores_spelling(write_batch, stage):
    """Keys without `event_id` hash user, UTC event time and canonical payload: one instant
    with two offsets, keys in another order and `2.50` for `2.5` are one event."""
    write_batch(
        "b1",
        [
            event({"b": 2.50, "a": {"y": 1, "x": [1, "z"]}}),
            event({"a": {"x": [1, "z"], "y": 1}, "b": 2.5}, ts="2024-05-01T12:00:00+02:00"),
            event({"a": 1}, event_id="given-1"),
        ],
    )
    rows = sorted(stage("b1").frame.collect(), key=lambda r: r.source_line)
    canonical = '{"a":{"x":[1,"z"],"y":1},"b":2.5}'
    expected = derived_key("u1", canonical)
    assert [r.event_id for r in rows] == [expected, expected, "given-1"]
    assert [r.payload for r in rows[:2]] == [canonical, canonical]
    assert [r.key_derived for r in rows] == [True, True, False]
    assert str(rows[0].event_date) == "2024-05-01"


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("{oops", "malformed JSON"),
        ('{"user_id": "u1", "user_id": "u2"}', "field 'user_id' is given twice"),
        ("[1, 2]", "line is not a JSON object"),
        ("42", "line is not a JSON object"),
        ('"event"', "line is not a JSON object"),
        ("null", "line is not a JSON object"),
        (json.dumps({"user_id": "u1"}), "missing required field 'event_timestamp'"),
        (json.dumps({**event(), "user_id": 7}), "field 'user_id' is BIGINT, not text"),
        (json.dumps({**event(), "event_id": 7}), "field 'event_id' is BIGINT, not text"),
        (json.dumps({**event(), "event_id": " "}), "field 'event_id' is empty"),
        (
            json.dumps(event(ts="2024-05-01T10:00:00")),
            "event_timestamp '2024-05-01T10:00:00' is not ISO-8601 with an offset",
        ),
        (json.dumps({**event(), "payload": "{}"}), "field 'payload' is STRING, not a JSON object"),
        (
            json.dumps({k: v for k, v in event().items() if k != "payload"}),
            "missing required field 'payload'",
        ),
        (
            json.dumps({k: v for k, v in event().items() if k != "ingestion_time"}),
            "missing required field 'ingestion_time'",
        ),
        (json.dumps(event(op="remove")), "op 'remove' is not one of upsert, delete"),
    ],
)
def test_a_bad_line_is_named_by_file_line_and_field(write_batch, stage, line, reason):
    write_batch("bad", json.dumps(event()) + "\n" + line + "\n")
    with pytest.raises(SourceDataError) as error:
        stage("bad")
    assert f"events/bad.jsonl:2: {reason}" in str(error.value)


@pytest.mark.long_on_delta_spark
def test_the_newest_version_wins_inside_a_batch_and_across_batches(lakehouse, write_batch, apply):
    write_batch("b1", [event({"v": 1}, event_id="e1"), event({"v": 2}, event_id="e1", ts=T1)])
    merged = apply("b1")
    assert merged.result.metrics["rows_inserted"] == 1
    assert table(lakehouse) == [("e1", '{"v":2}', False, "2024-05-03T00:00:00+00:00")]
    # An older version arriving later changes nothing; a later ingestion of the same
    # event time wins.
    write_batch("b2", [event({"v": 0}, event_id="e1", seen=SEEN2)])
    apply("b2")
    assert table(lakehouse) == [("e1", '{"v":2}', False, "2024-05-03T00:00:00+00:00")]
    write_batch("b3", [event({"v": 3}, event_id="e1", ts=T1, seen=SEEN2)])
    apply("b3")
    assert table(lakehouse) == [("e1", '{"v":3}', False, "2024-05-04T00:00:00+00:00")]


@pytest.mark.long_on_delta_spark
def test_a_tombstone_keeps_older_upserts_out_and_lets_newer_ones_in(lakehouse, write_batch, apply):
    write_batch("delete", [event({}, event_id="e1", ts=T1, op="delete")])
    apply("delete")  # a tombstone for a key never seen before is stored too
    assert table(lakehouse) == [("e1", "{}", True, "2024-05-03T00:00:00+00:00")]
    write_batch("older", [event({"v": 1}, event_id="e1", ts=T0, seen=SEEN2)])
    apply("older")
    assert [r[2] for r in table(lakehouse)] == [True]
    write_batch("newer", [event({"v": 2}, event_id="e1", ts=T2)])
    apply("newer")
    assert table(lakehouse) == [("e1", '{"v":2}', False, "2024-05-03T00:00:00+00:00")]


N1 = '{"n":1}'
BATCHES = {
    "a": [
        event({"v": 1}, event_id="e1"),
        event({"n": 1}),
        event({"v": 1}, event_id="e2", ts=T2),
        event({"v": 1}, event_id="e3", user_id="u2"),
    ],
    "b": [
        event({"v": 2}, event_id="e1", ts=T1),
        event({}, event_id="e2", ts=T2, seen=SEEN2, op="delete"),
        event({"n": 1}),  # the same version as in "a"
    ],
    "c": [
        event({"v": 9}, event_id="e1", ts=T1),  # same time and ingestion: content decides
        event({"v": 3}, event_id="e2", ts=T0),
        event({"n": 2}, user_id="u2"),
        # Versions that differ in columns the content digest leaves out: from another
        # user, and with the key given that "a" and "b" derive.
        event({"v": 1}, event_id="e3"),
        event({"n": 1}, event_id=derived_key("u1", N1)),
    ],
}


@pytest.mark.parametrize(
    "order",
    [
        # On delta-spark the publish's MERGE is proven by the versions years apart and
        # the marked row below; this test's orders run there with `make test-slow`.
        pytest.param("abc", marks=pytest.mark.long_on_delta_spark),
        pytest.param("cba", marks=pytest.mark.long_on_delta_spark),
        pytest.param("bcacab", marks=pytest.mark.long_on_delta_spark),
    ],
)
def test_any_order_of_batches_replayed_any_number_of_times_gives_one_table(
    lakehouse, write_batch, apply, order
):
    """Every column of every row is the same whatever the order: versions equal in time,
    ingestion and content are told apart by user, key derivation and batch, the larger
    winning, so even which batch delivered a version is decided by the order."""
    for name, rows in BATCHES.items():
        write_batch(name, rows)
    for name in order:
        apply(name)
    # e1: T1 beats T0; between the two T1 versions (same ingestion) the larger content
    # digest wins.
    e1 = max(
        ("b", '{"v":2}', hashlib.sha256(b'{"op":"upsert","payload":"{\\"v\\":2}"}').hexdigest()),
        ("c", '{"v":9}', hashlib.sha256(b'{"op":"upsert","payload":"{\\"v\\":9}"}').hexdigest()),
        key=lambda p: p[2],
    )
    expected = {
        "e1": (e1[1], False, "u1", False, e1[0]),
        # The tombstone at T2, ingested later, beats the upsert at T2.
        "e2": ("{}", True, "u1", False, "b"),
        "e3": ('{"v":1}', False, "u2", False, "a"),  # user u2 sorts after u1
        # A derived key sorts after the same key given; "b" after "a".
        derived_key("u1", N1): (N1, False, "u1", True, "b"),
        derived_key("u2", '{"n":2}'): ('{"n":2}', False, "u2", True, "c"),
    }
    rows = every_column(lakehouse)
    shown = ("payload", "is_deleted", "user_id", "key_derived", "batch_id")
    assert {r["event_id"]: tuple(r[c] for c in shown) for r in rows} == expected
    assert [r["ingestion_time"].isoformat()[:10] for r in rows] == [
        "2024-05-04" if r["event_id"] == "e2" else "2024-05-03" for r in rows
    ]
    assert lakehouse.count(USER_EVENTS) == 5


FAR = "2024-05-09T09:00:00+00:00"


@pytest.mark.long_on_delta_spark
def test_the_merge_is_pinned_to_the_batchs_days(lakehouse, write_batch, apply):
    """A batch leaves the files of days that hold none of its keys as they are."""
    write_batch("day1", [event({"v": i}, event_id=f"d1-{i}") for i in range(3)])
    write_batch("day9", [event({"v": i}, event_id=f"d9-{i}", ts=FAR) for i in range(3)])
    apply("day1")
    apply("day9")
    write_batch("day9-again", [event({"v": 9}, event_id="d9-0", ts=FAR, seen=SEEN2)])
    merged = apply("day9-again")
    assert [d.isoformat() for d in merged.days] == ["2024-05-09"]
    assert (merged.files_in_window, merged.files_skipped) == (1, 1)
    # The files the commit removed, added or marked (deletion vectors re-add a file).
    commit = Path(lakehouse.uri(USER_EVENTS)) / "_delta_log" / f"{merged.result.version:020d}.json"
    actions = [json.loads(line) for line in commit.read_text().splitlines()]
    touched = [a[kind]["path"] for a in actions for kind in ("add", "remove") if kind in a]
    assert touched and all("event_date=2024-05-09" in path for path in touched)


# Versions of one event 13 and 36 months apart: further apart than any window.
LONG_AGO = {
    "v1": event({"v": 1}, event_id="e1", ts="2021-04-01T08:00:00+00:00"),
    "v2": event({"v": 2}, event_id="e1", ts="2022-05-01T08:00:00+00:00"),
    "v3": event({"v": 3}, event_id="e1", ts="2024-04-01T08:00:00+00:00", seen=SEEN2),
}


def days_of(lakehouse, event_id: str) -> list[str]:
    rows = lakehouse.read_arrow(USER_EVENTS, columns=["event_id", "event_date"]).to_pylist()
    return sorted(str(r["event_date"]) for r in rows if r["event_id"] == event_id)


@pytest.mark.parametrize(
    "order",
    [
        ["v1", "v2", "v3"],
        pytest.param(["v3", "v1", "v2"], marks=pytest.mark.long_on_delta_spark),
        pytest.param(["v2", "v3", "v1", "v3", "v2"], marks=pytest.mark.long_on_delta_spark),
    ],
)
def test_versions_years_apart_leave_one_row_at_the_newest(lakehouse, write_batch, apply, order):
    """The record-level index finds the day a key's row is in, however far from the
    batch's own days: one row per event, at its newest version, in every order."""
    for name, row in LONG_AGO.items():
        write_batch(name, [row, event({"n": name})])
    for name in order:
        apply(name)
    assert days_of(lakehouse, "e1") == ["2024-04-01"]
    assert [r[1] for r in table(lakehouse) if r[0] == "e1"] == ['{"v":3}']
    assert lakehouse.count(USER_EVENTS) == 4  # e1 and one derived key per batch


def test_a_row_a_newer_version_moves_out_of_its_day_by_the_engines_own_merge(
    lakehouse, write_batch, apply
):
    """The row a version years newer moves out of its day leaves it by the engine's own
    MERGE: Delta Spark marks it with a deletion vector and keeps the day's file; delta-rs,
    which cannot write vectors yet (delta-rs issue 4512), writes the day's other rows
    again. Both engines read the table alike, and its count is exact."""
    long_ago = LONG_AGO["v1"]["event_timestamp"]
    write_batch("old", [LONG_AGO["v1"]] + [event(event_id=f"o{i}", ts=long_ago) for i in range(9)])
    write_batch("new", [LONG_AGO["v2"]])
    apply("old")
    uri = lakehouse.uri(USER_EVENTS)
    old_files = set(DeltaTable(uri).file_uris())
    merged = apply("new")
    assert days_of(lakehouse, "e1") == ["2022-05-01"]
    commit = (Path(uri) / "_delta_log" / f"{merged.result.version:020d}.json").read_text()
    metrics = merged.result.metrics
    if lakehouse.engine == "delta-spark":
        assert '"deletionVector":{' in commit and old_files <= set(DeltaTable(uri).file_uris())
        assert (metrics["rows_updated"], metrics["rows_copied"], metrics["files_marked"]) == (
            1,
            0,
            1,
        )
    else:
        assert '"deletionVector":{' not in commit
        assert (metrics["rows_updated"], metrics["rows_copied"]) == (1, 9)
    assert lakehouse.read_arrow(USER_EVENTS).num_rows == lakehouse.count(USER_EVENTS) == 10
    by_spark = lakehouse.spark.session().read.format("delta").load(uri)
    assert sorted(r.event_id for r in by_spark.select("event_id").collect()) == sorted(
        ["e1", *(f"o{i}" for i in range(9))]
    )


def coverage(lakehouse) -> tuple[set[tuple], set[tuple]]:
    """(the index's pairs, the pairs of the table's live rows), as (key_hash, day)."""
    held = lakehouse.read_arrow(KEY_INDEX, columns=key_index.SCHEMA.names)
    live = key_index.pairs(
        lakehouse.read_arrow(
            USER_EVENTS, columns=["event_date"], computed={"key_digest": key_index.KEY_DIGEST}
        )
    )
    return (
        {tuple(r.values()) for r in held.to_pylist()},
        {tuple(r.values()) for r in live.to_pylist()},
    )


def test_the_index_covers_every_live_row_through_moves_replays_and_a_compaction(
    lakehouse, write_batch, apply
):
    """Each publish appends its batch's keys and days, and a compaction leaves rows in
    their days: every live row's key and day is in the index, and the publish after a
    compaction still keeps one row per key."""
    moved = LONG_AGO["v3"]["event_timestamp"]
    write_batch("v1", [LONG_AGO["v1"], event({"n": 1})])
    write_batch("v2", [LONG_AGO["v2"], event({"n": 2}, ts=moved)])
    write_batch("v3", [LONG_AGO["v3"], event({"n": 3}, ts=moved)])
    write_batch("late", [LONG_AGO["v1"], event({"n": 4}, ts=moved)])
    for name in ("v1", "v2", "v2", "v3"):
        apply(name)
        held, live = coverage(lakehouse)
        assert live <= held
    lakehouse.compact(USER_EVENTS, metadata={"test": "compaction"})
    merged = apply("late")  # v1 again, and the compacted day's events beside it
    assert merged.result.metrics["rows_updated"] == 0
    held, live = coverage(lakehouse)
    assert live <= held
    assert days_of(lakehouse, "e1") == ["2024-04-01"]
    assert [r[1] for r in table(lakehouse) if r[0] == "e1"] == ['{"v":3}']
    assert lakehouse.count(USER_EVENTS) == 5  # e1 and one derived key per batch


@pytest.mark.long_on_delta_spark
def test_the_index_is_compacted_as_it_grows_and_rebuilt_past_its_share(
    lakehouse, write_batch, apply, monkeypatch
):
    """Every `COMPACT_EVERY` appends the index's files are compacted (the engine's
    OPTIMIZE), or, past `REBUILD_FACTOR` pairs per row, it is rebuilt, one pair per row."""
    monkeypatch.setattr(key_index, "COMPACT_EVERY", 3)
    monkeypatch.setattr(key_index, "REBUILD_FACTOR", 10**9)
    for n in range(4):
        write_batch(f"b{n}", [event({"n": n, "i": i}, event_id=f"b{n}-{i}") for i in range(5)])
        apply(f"b{n}")
        held, live = coverage(lakehouse)
        assert live <= held
    operations = [e.operation.upper() for e in lakehouse.history(KEY_INDEX)]
    assert "OPTIMIZE" in operations
    monkeypatch.setattr(key_index, "REBUILD_FACTOR", 0)
    monkeypatch.setattr(key_index, "COMPACT_EVERY", 1)
    write_batch("b4", [event({"n": 4}, event_id="b1-0", seen=SEEN2)])
    merged = apply("b4")
    assert lakehouse.app_transaction_version(KEY_INDEX, key_index.DESCRIBES) == (
        merged.result.version
    )
    rebuilt = lakehouse.history(KEY_INDEX, limit=1)[0]
    assert int(rebuilt.metadata["index_rebuilt_from"]) == merged.result.version
    held, live = coverage(lakehouse)
    assert held == live and len(live) == lakehouse.count(USER_EVENTS) == 20


@pytest.mark.long_on_delta_spark
def test_a_publish_whose_index_record_failed_loses_nothing(
    lakehouse, write_batch, apply, monkeypatch
):
    """A failure between the MERGE's commit and the index's append, then a RESTORE of
    the table: each time the next publish sees the index is behind and rebuilds it."""
    write_batch("v1", [LONG_AGO["v1"]])
    write_batch("v2", [LONG_AGO["v2"]])
    write_batch("v3", [LONG_AGO["v3"]])
    apply("v1")

    def crash(*args, **kwargs):
        raise OSError("the process died after the MERGE committed")

    with monkeypatch.context() as patched:
        patched.setattr(key_index, "record", crash)
        with pytest.raises(OSError):
            apply("v2")  # e1 moved from 2021-04-01 to 2022-05-01; the index was not told
    assert days_of(lakehouse, "e1") == ["2022-05-01"]
    merged = apply("v3")
    assert [d.isoformat() for d in merged.days] == ["2022-05-01", "2024-04-01"]
    assert days_of(lakehouse, "e1") == ["2024-04-01"]
    assert lakehouse.app_transaction_version(KEY_INDEX, key_index.DESCRIBES) == (
        lakehouse.version(USER_EVENTS)
    )
    # Back to the table before v3 (e1 in 2022), then v3 again.
    lakehouse.restore(USER_EVENTS, merged.result.version - 1, metadata={"test": "restore"})
    assert days_of(lakehouse, "e1") == ["2022-05-01"]
    apply("v3")
    assert days_of(lakehouse, "e1") == ["2024-04-01"]
    assert lakehouse.count(USER_EVENTS) == 1


@pytest.mark.long_on_delta_spark
def test_an_index_of_event_ids_is_rebuilt_as_key_hashes_and_still_finds_every_day(
    lakehouse, write_batch, apply
):
    """An index an earlier release wrote (event ids, its version under the app id
    `user_events`): the next publish rebuilds it in one commit as key hashes with each
    its day, finds the day the key's row is in, and leaves one row."""
    write_batch("v1", [LONG_AGO["v1"]])
    write_batch("v2", [LONG_AGO["v2"]])
    apply("v1")
    described = lakehouse.version(USER_EVENTS)
    lakehouse.drop(KEY_INDEX)
    earlier = pa.table({"event_id": ["e1"], "event_date": [dt.date(2021, 4, 1)]})
    lakehouse.in_process().append(
        KEY_INDEX,
        earlier,
        metadata={"test": "an earlier release"},
        app_transaction=AppTransaction("user_events", described),
    )
    merged = apply("v2")
    assert [d.isoformat() for d in merged.days] == ["2021-04-01", "2022-05-01"]
    assert days_of(lakehouse, "e1") == ["2022-05-01"]
    assert lakehouse.count(USER_EVENTS) == 1
    facts = lakehouse.in_process().table_facts(KEY_INDEX)
    assert [(c.name, c.type) for c in facts.columns] == [
        ("key_hash", "long"),
        ("event_date", "date"),
    ]
    assert facts.version == 2  # the earlier index, its rebuild, the publish's entries
    assert (
        lakehouse.app_transaction_version(KEY_INDEX, key_index.DESCRIBES) == merged.result.version
    )


KEYS = ["e1", "\u00e9v\u00e9nement/'1'", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd1"]


def test_a_batch_and_a_rebuild_hash_every_key_alike_as_documented(spark, lakehouse):
    """Spark hashes a batch's keys and DataFusion (delta-rs's query) the keys of a table
    a rebuild reads: both give the first 8 bytes of the key's SHA-256, big-endian and
    signed, an index written by one release being read by the next (changing the hash
    must change `DESCRIBES`)."""
    expected = [
        int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big", signed=True)
        for key in KEYS
    ]
    assert expected[0] == -8404626340394009294
    digest = F.expr(key_index.KEY_DIGEST.render("spark")).alias("key_digest")
    batch = spark.session().createDataFrame(
        [(key, dt.date(2024, 5, 1)) for key in KEYS], "event_id string, event_date date"
    )
    by_spark = key_index.pairs(batch.select(digest, "event_date").toArrow())
    assert by_spark["key_hash"].to_pylist() == expected
    lakehouse.append("keys", pa.table({"event_id": KEYS}), metadata={"test": "keys"})
    digests = lakehouse.read_arrow(
        "keys", columns=["event_id"], computed={"d": key_index.KEY_DIGEST}
    )
    assert key_index.key_hashes(digests["d"].slice(1)).to_pylist() == expected[1:]


@pytest.mark.long_on_delta_spark
def test_a_publish_overtaken_between_its_lookup_and_its_commit_looks_up_again(
    lakehouse, write_batch, apply, monkeypatch
):
    """Two publishes of one key at once: the one whose lookup is older is refused at
    commit (its app transaction no longer advances the table's) and looks up again."""
    for name, row in LONG_AGO.items():
        write_batch(name, [row])
    apply("v1")
    lookup = key_index.days_holding
    overtaken: list[str] = []

    def overtake(lake, keys, read_ahead):
        found = lookup(lake, keys, read_ahead)
        if not overtaken:
            overtaken.append("v2")
            apply("v2")  # moves e1 from 2021 to 2022 after v3 looked it up in 2021
        return found

    monkeypatch.setattr(key_index, "days_holding", overtake)
    merged = apply("v3")
    # Looked up again: e1 found where v2 moved it.
    assert {"2022-05-01", "2024-04-01"} <= {d.isoformat() for d in merged.days}
    assert days_of(lakehouse, "e1") == ["2024-04-01"]
    assert lakehouse.count(USER_EVENTS) == 1


@pytest.fixture
def restore_after_the_next_lookup(lakehouse, write_batch, apply, monkeypatch):
    """e1 published at v1 (2021) then v2 (2022), with v1's other event kept in 2021; the
    index rebuilt, so it names 2022 only for e1; and a RESTORE of the table to before v2
    (e1 back in 2021) set to land right after the next publish's lookup, once."""
    write_batch("v1", [LONG_AGO["v1"], event({"n": 1}, ts=LONG_AGO["v1"]["event_timestamp"])])
    write_batch("v2", [LONG_AGO["v2"]])
    write_batch("v3", [LONG_AGO["v3"]])
    apply("v1")
    before_the_move = lakehouse.version(USER_EVENTS)
    apply("v2")
    rebuilt = {"batch_id": "v2"}
    repair = OneRowPerKey(lakehouse, rebuilt)
    key_index.rebuild(lakehouse, lakehouse.version(USER_EVENTS), rebuilt, repair=repair)
    assert repair.rows_removed == 0
    lookup = key_index.days_holding
    restored: list[int] = []

    def restore_after_the_lookup(lake, keys, read_ahead):
        found = lookup(lake, keys, read_ahead)
        if not restored:
            restored.append(lake.restore(USER_EVENTS, before_the_move, metadata={}).version)
        return found

    monkeypatch.setattr(key_index, "days_holding", restore_after_the_lookup)


@pytest.mark.usefixtures("restore_after_the_next_lookup")
def test_a_restore_between_a_publishs_lookup_and_its_commit_leaves_one_row_per_key(
    lakehouse, apply
):
    """A RESTORE that lands between a publish's lookup and its MERGE puts a key's old row
    back in a day the lookup did not name, so the MERGE inserts the key beside it. The
    publish sees the RESTORE in the history between the two and rebuilds the index; the
    rebuild finds the key on two rows and keeps the winning one; no other row of the
    rewritten day is touched."""
    merged = apply("v3")
    assert "2021-04-01" not in [d.isoformat() for d in merged.days]  # the race happened
    assert days_of(lakehouse, "e1") == ["2024-04-01"]
    assert [r[1] for r in table(lakehouse) if r[0] == "e1"] == ['{"v":3}']
    assert lakehouse.count(USER_EVENTS) == 2  # e1 and v1's other event, kept
    assert merged.rows_repaired == 1
    repair = lakehouse.history(USER_EVENTS, limit=1)[0]
    assert repair.version == merged.result.version + 1
    assert int(repair.metadata["rows_repaired"]) == 1
    assert lakehouse.app_transaction_version(USER_EVENTS, PUBLISH) == repair.version
    assert lakehouse.app_transaction_version(KEY_INDEX, key_index.DESCRIBES) == repair.version


@pytest.mark.long_on_delta_spark
@pytest.mark.usefixtures("restore_after_the_next_lookup")
def test_a_repair_that_failed_after_its_publish_committed_is_made_by_the_next_lookup(
    lakehouse, write_batch, apply, monkeypatch
):
    """The run dies in the repair that a RESTORE between lookup and MERGE called for: the
    MERGE committed, the key holds two rows, and the index was not written. The next
    publish (another batch, of another key) rebuilds the index, finds the key on two rows
    and keeps the winning one before it merges."""
    write_batch("other", [event({"n": 2}, event_id="e2")])

    def crash(*args, **kwargs):
        raise OSError("the process died in the repair")

    with monkeypatch.context() as patched:
        patched.setattr(OneRowPerKey, "__call__", crash)
        with pytest.raises(OSError, match="died in the repair"):
            apply("v3")
    assert days_of(lakehouse, "e1") == ["2021-04-01", "2024-04-01"]  # what the crash left
    described = lakehouse.app_transaction_version(KEY_INDEX, key_index.DESCRIBES)
    assert described < lakehouse.version(USER_EVENTS)
    merged = apply("other")
    assert days_of(lakehouse, "e1") == ["2024-04-01"]
    assert [r[1] for r in table(lakehouse) if r[0] == "e1"] == ['{"v":3}']
    assert lakehouse.count(USER_EVENTS) == 3  # e1, v1's other event, e2
    assert merged.rows_repaired == 1
    repair = lakehouse.history(USER_EVENTS, limit=2)[1]
    assert repair.version == merged.result.version - 1
    assert lakehouse.app_transaction_version(USER_EVENTS, PUBLISH) == merged.result.version
    assert lakehouse.app_transaction_version(KEY_INDEX, key_index.DESCRIBES) == (
        merged.result.version
    )


@pytest.mark.long_on_delta_spark
def test_user_events_keep_one_row_per_event_on_the_object_store(s3_lakehouse, spark):
    """On an object store as on a local disk, the publish MERGEs the days the index names:
    versions of one event years apart, in any order, leave one row at the newest."""

    def version(n: int, year: int) -> pa.Table:
        at = dt.datetime(year, 4, 1, 8, tzinfo=dt.UTC)
        row = {
            "event_id": "e1",
            "user_id": "u1",
            "event_timestamp": at,
            "ingestion_time": at,
            "payload": f'{{"v":{n}}}',
            "is_deleted": False,
            "event_date": at.date(),
            "batch_id": f"v{n}",
            "key_derived": False,
            "content_digest": str(n),
        }
        return pa.Table.from_pylist([row], schema=TABLE_SCHEMA)

    lake = s3_lakehouse
    for n, year in ((3, 2024), (1, 2021), (2, 2022)):
        merge_batch(
            lake, frame_from_arrow(spark.session(), version(n, year)), metadata={"test": "s3"}
        )
    rows = lake.read_arrow(USER_EVENTS).to_pylist()
    assert [(r["payload"], r["event_date"].year) for r in rows] == [('{"v":3}', 2024)]
    assert lake.read_arrow(KEY_INDEX).num_rows >= 1
