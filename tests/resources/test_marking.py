"""The delta-rs engine's own MERGE commit (`resources.lakehouse.marking`): what the
contract suite cannot reach through the port."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from resources import Lakehouse
from resources.lakehouse import NewestWins, marking
from resources.lakehouse.delta_rs import _files_selected
from resources.lakehouse.predicates import Compare, is_in

META = {"dagster_run_id": "test-run"}
DAY = dt.date(2024, 1, 1)
PROPERTIES = {"delta.enableDeletionVectors": "true"}
UPSERT = NewestWins("key", ("at",), "day", (DAY,))


@pytest.fixture
def lake(tmp_path: Path, spark) -> Lakehouse:
    return Lakehouse(root=str(tmp_path / "lake"), engine="delta-rs", spark=spark)


def events(rows: list[tuple[str, dt.datetime]], day: dt.date = DAY) -> pa.Table:
    return pa.table(
        {
            "key": pa.array([r[0] for r in rows], pa.string()),
            "at": pa.array([r[1] for r in rows], pa.timestamp("us", "UTC")),
            "day": pa.array([day] * len(rows), pa.date32()),
        }
    )


def created(lake: Lakehouse, rows: pa.Table) -> None:
    """Table `e` made with `rows`, partitioned by day, with deletion vectors."""
    lake.append("e", rows, metadata=META, partition_by=["day"], table_properties=PROPERTIES)


def data_files(lake: Lakehouse) -> set[Path]:
    root = Path(lake.uri("e"))
    return {p for p in root.rglob("*") if p.is_file() and "_delta_log" not in p.parts}


def test_a_commit_that_lost_its_version_is_refused_and_leaves_no_file(lake):
    """Another writer committed after the snapshot the upsert read: the log entry it
    would take exists, so the commit is refused (the lakehouse then starts again) and the
    vector and data files it wrote are deleted."""
    at = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    created(lake, events([("a", at), ("b", at)]))
    stale = DeltaTable(lake.uri("e"))
    lake.append("e", events([("c", at)]), metadata=META)
    files = data_files(lake)
    with pytest.raises(CommitFailedError, match="committed by another writer first"):
        marking.upsert(
            stale,
            events([("a", at + dt.timedelta(hours=1)), ("d", at)]),
            _files_selected(stale, is_in("day", [DAY]))[1],
            upsert=UPSERT,
            commit_info={},
            app_transaction=None,
        )
    assert data_files(lake) == files
    assert sorted(lake.read_arrow("e")["key"].to_pylist()) == ["a", "b", "c"]


def test_the_bounds_of_a_new_file_hold_every_timestamp_it_has(lake):
    """The log keeps timestamps to the millisecond: a new file's bounds are rounded
    outwards, so a reader that skips files by them never skips a row (microseconds past
    the millisecond, below and above)."""
    at = dt.datetime(2024, 1, 1, 12, tzinfo=dt.UTC)
    created(lake, events([("a", at)]))
    low, high = at + dt.timedelta(microseconds=1001), at + dt.timedelta(microseconds=2999)
    lake.upsert_newest(
        "e",
        events([("a", high), ("b", low)]),
        upsert=UPSERT,
        metadata=META,
    )
    for bound in (low, high):
        found = lake.read_arrow("e", where=Compare("at", "=", bound))["key"].to_pylist()
        assert found == (["b"] if bound == low else ["a"])
        frame = lake.spark.session().read.format("delta").load(lake.uri("e"))
        assert frame.where(frame.at == bound).count() == 1


def test_a_table_whose_features_it_does_not_keep_is_merged(lake):
    """A table with a change data feed needs change files that this commit does not
    write: the upsert is a MERGE there, and the feed names its changes."""
    at = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    lake.append(
        "e",
        events([("a", at)]),
        metadata=META,
        partition_by=["day"],
        table_properties={**PROPERTIES, "delta.enableChangeDataFeed": "true"},
    )
    assert (
        marking.upsert(
            DeltaTable(lake.uri("e")),
            events([("a", at + dt.timedelta(hours=1))]),
            _files_selected(DeltaTable(lake.uri("e")), is_in("day", [DAY]))[1],
            upsert=UPSERT,
            commit_info={},
            app_transaction=None,
        )
        is None
    )
    result = lake.upsert_newest(
        "e",
        events([("a", at + dt.timedelta(hours=1))]),
        upsert=UPSERT,
        metadata=META,
    )
    assert result.metrics["rows_updated"] == 1
    changes = lake.changes("e", after=0, until=result.version)
    assert sorted(changes["_change_type"].to_pylist()) == ["update_postimage", "update_preimage"]


def test_a_writer_that_read_a_file_before_it_was_marked_cannot_commit_over_the_marks(lake):
    """The commit removes and adds again each file it marks, as Delta Spark's does, so a
    compaction that read the file before is refused by delta-rs's conflict check, where
    it would otherwise write the marked rows back; made again, it keeps them out."""
    at = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    for part in range(3):
        created(lake, events([(f"k{part}a", at), (f"k{part}b", at)]))
    stale = DeltaTable(lake.uri("e"))
    later = at + dt.timedelta(hours=1)
    lake.upsert_newest("e", events([("k0a", later), ("k1a", later)]), upsert=UPSERT, metadata=META)
    expected = sorted(
        [("k0a", later), ("k1a", later)] + [(k, at) for k in ("k0b", "k1b", "k2a", "k2b")]
    )

    def content() -> list[tuple]:
        rows = lake.read_arrow("e")
        return sorted(zip(rows["key"].to_pylist(), rows["at"].to_pylist(), strict=True))

    with pytest.raises(CommitFailedError, match="concurrent transaction deleted data"):
        stale.optimize.compact()
    assert content() == expected
    lake.compact("e", metadata=META)
    assert content() == expected and lake.count("e") == 6


def test_rows_located_by_the_caller_are_marked_where_they_lie(lake):
    """The caller hands over where the rows of its keys lie (an index's places, some of
    rows already marked): each live one is compared and marked at its place, a dead one
    is passed over, a key without a live row is inserted. After a compaction, the places
    name a file that left the table, and the upsert reads the partition instead."""
    at = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    hour = dt.timedelta(hours=1)
    created(lake, events([("a", at), ("b", at), ("c", at)]))
    before = lake.version("e")
    first = lake.located_rows("e", version=before, columns=["key", "at"])
    lake.upsert_newest("e", events([("b", at + hour)]), upsert=UPSERT, metadata=META)
    added = lake.located_rows("e", version=lake.version("e"), columns=["key", "at"], after=before)
    assert [(r["key"], r["_row"]) for r in added.to_pylist()] == [("b", 0)]  # the new file's
    live = lake.located_rows("e", version=lake.version("e"), columns=["key", "at"])
    assert sorted((r["key"], r["_row"]) for r in live.to_pylist()) == [("a", 0), ("b", 0), ("c", 2)]

    places = pa.concat_tables([first, added])  # b's first row is marked by now
    located = places.filter(pa.compute.is_in(places["key"], value_set=pa.array(["a", "b"])))
    result = lake.upsert_newest(
        "e",
        events([("a", at + 2 * hour), ("b", at), ("z", at)]),
        upsert=NewestWins("key", ("at",), "day", (DAY,), located),
        metadata=META,
    )
    assert (result.metrics["rows_updated"], result.metrics["rows_inserted"]) == (1, 1)
    assert result.metrics["files_marked"] == 1
    rows = sorted(lake.read_arrow("e").select(["key", "at"]).to_pylist(), key=lambda r: r["key"])
    assert [(r["key"], r["at"] - at) for r in rows] == [
        ("a", 2 * hour),
        ("b", hour),  # its stored version is newer than the batch's
        ("c", dt.timedelta(0)),
        ("z", dt.timedelta(0)),
    ]

    lake.compact("e", metadata=META)
    gone = places.filter(pa.compute.equal(places["key"], "c"))  # c's place before compaction
    result = lake.upsert_newest(
        "e",
        events([("c", at + hour)]),
        upsert=NewestWins("key", ("at",), "day", (DAY,), gone),
        metadata=META,
    )
    assert (result.metrics["rows_updated"], result.metrics["rows_inserted"]) == (1, 0)
    assert sorted(lake.read_arrow("e")["key"].to_pylist()) == ["a", "b", "c", "z"]


def test_a_file_that_loses_its_last_rows_is_removed_not_marked(lake):
    """As Delta Spark's MERGE does: a file whose every row is replaced leaves the table
    (no vector keeps it), and Spark reads the table as delta-rs does."""
    at = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    hour = dt.timedelta(hours=1)
    created(lake, events([("a", at), ("b", at)]))
    lake.append("e", events([("c", at)]), metadata=META)
    before = set(DeltaTable(lake.uri("e")).file_uris())
    result = lake.upsert_newest(
        "e",
        events([("a", at + hour), ("b", at + hour), ("c", at + hour)]),
        upsert=UPSERT,
        metadata=META,
    )
    metrics = result.metrics
    assert (metrics["rows_updated"], metrics["files_removed"], metrics["files_marked"]) == (3, 2, 0)
    after = set(DeltaTable(lake.uri("e")).file_uris())
    assert not before & after and len(after) == 1
    assert not list(Path(lake.uri("e")).glob("deletion_vector_*.bin"))
    by_spark = lake.spark.session().read.format("delta").load(lake.uri("e"))
    assert sorted(r.key for r in by_spark.collect()) == ["a", "b", "c"]
    assert sorted(r["at"] - at for r in lake.read_arrow("e").to_pylist()) == [hour] * 3
