"""One contract for the Delta port, run against every engine."""

from __future__ import annotations

import datetime as dt
import hashlib
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from resources import Lakehouse, SparkResource
from resources.lakehouse import (
    AppTransaction,
    ChangesUnavailableError,
    LakehouseError,
    StaleWriteError,
    Stream,
    VersionUnavailableError,
    WhenMatchedDelete,
    WhenMatchedUpdate,
    WhenNotMatchedInsert,
    spooled,
)
from resources.lakehouse.delta_rs import DeltaRsEngine
from resources.lakehouse.predicates import (
    And,
    Compare,
    Constant,
    IsTrue,
    Not,
    Or,
    PredicateError,
    Sha256,
    SortsAfter,
    between,
    eq,
    from_source,
    is_in,
    matches,
)

META = {"dagster_run_id": "test-run", "asset_key": "t", "partition_key": None}


@pytest.fixture
def lake(lakehouse: Lakehouse) -> Lakehouse:
    return lakehouse


def devices(rows: list[tuple[str, int, str]]) -> pa.Table:
    return pa.table(
        {
            "device": pa.array([r[0] for r in rows], pa.string()),
            "day": pa.array([dt.date(2024, 1, r[1]) for r in rows], pa.date32()),
            "name": pa.array([r[2] for r in rows], pa.string()),
        }
    )


def rows(lake: Lakehouse, table: str, **kwargs) -> list[tuple]:
    data = lake.read_arrow(table, **kwargs).to_pylist()
    return sorted((r["device"], r["day"].day, r["name"]) for r in data)


def test_append_creates_then_adds_and_reports_versions_and_metrics(lake):
    first = lake.append("t", devices([("a", 1, "x")]), metadata=META, partition_by=["day"])
    second = lake.append("t", devices([("b", 2, "y"), ("c", 2, "z")]), metadata=META)
    assert (first.version, second.version) == (0, 1)
    assert second.metrics["rows_inserted"] == 2
    assert lake.version("t") == 1
    assert rows(lake, "t") == [("a", 1, "x"), ("b", 2, "y"), ("c", 2, "z")]


def test_an_empty_append_creates_the_table_with_its_schema(lake):
    """A control table is created empty before its first rows (also through Spark
    Connect, which infers no schema from an empty Arrow table)."""
    created = lake.append("t", devices([]), metadata=META)
    assert created.version == 0
    assert lake.read_arrow("t").schema.names == ["device", "day", "name"]
    assert lake.read_arrow("t").num_rows == 0
    lake.append("t", devices([("a", 1, "x")]), metadata=META)
    assert rows(lake, "t") == [("a", 1, "x")]


def test_read_at_a_version_and_with_a_predicate(lake):
    lake.append("t", devices([("a", 1, "x")]), metadata=META, partition_by=["day"])
    lake.append("t", devices([("b", 2, "y")]), metadata=META)
    assert rows(lake, "t", version=0) == [("a", 1, "x")]
    assert rows(lake, "t", where=eq("day", dt.date(2024, 1, 2))) == [("b", 2, "y")]
    frame = lake.read("t", where=eq("device", "a"))
    assert [r["name"] for r in frame.collect()] == ["x"]


def test_a_read_of_some_columns_returns_those_in_the_order_asked(lake):
    lake.append("t", devices([("a", 1, "x")]), metadata=META, partition_by=["day"])
    lake.append("t", devices([("b", 2, "y")]), metadata=META)
    picked = lake.read_arrow("t", columns=["name", "device"], where=eq("day", dt.date(2024, 1, 2)))
    assert picked.to_pylist() == [{"name": "y", "device": "b"}]
    frame = lake.read("t", version=0, columns=["name"])
    assert [tuple(r) for r in frame.collect()] == [("x",)]


def test_count_matches_the_rows_a_read_returns(lake):
    lake.append("t", devices([("a", 1, "x"), ("b", 2, "y"), ("c", 2, "z")]), metadata=META)
    assert lake.count("t") == 3
    assert lake.count("t", where=eq("day", dt.date(2024, 1, 2))) == 2
    assert lake.count("t", where=eq("device", "it's")) == 0
    lake.append("t", devices([("d", 2, "w")]), metadata=META)
    # At a version as at the latest.
    assert lake.count("t", where=eq("day", dt.date(2024, 1, 2)), version=0) == 2
    assert lake.count("t", where=eq("device", "d"), version=0) == 0
    assert lake.count("t", where=eq("device", "d")) == 1


def test_a_count_of_whole_partitions_is_read_from_the_log_and_stays_exact(lake):
    """Counting a day of a partitioned table needs no Spark job: the log's per-file row
    counts answer it. The answer must equal the query's after deletes and rewrites too."""
    lake.append(
        "t",
        devices([("a", 1, "x"), ("b", 2, "y"), ("c", 2, "z"), ("d", 3, "w")]),
        metadata=META,
        partition_by=["day"],
    )
    lake.append("t", devices([("e", 2, "v")]), metadata=META)
    lake.delete("t", where=eq("device", "c"), metadata=META)
    day = [dt.date(2024, 1, n) for n in range(1, 5)]
    expected = {
        eq("day", day[1]): 2,
        between("day", day[0], day[1]): 3,
        is_in("day", [day[0], day[2], day[3]]): 2,
        Or((eq("day", day[0]), Compare("day", ">", day[1]))): 2,
        Compare("day", "<>", day[1]): 2,
        eq("day", day[3]): 0,
        And((eq("day", day[1]), eq("device", "b"))): 1,
    }
    for where, rows_matching in expected.items():
        assert lake.count("t", where=where) == rows_matching, where
        assert lake.read_arrow("t", where=where).num_rows == rows_matching, where
    # At a version (before the delete) from the log as well.
    assert lake.count("t", where=eq("day", day[1]), version=1) == 3
    log = DeltaRsEngine()
    assert log.count_from_log(lake.uri("t"), where=eq("day", day[1])) == 2
    assert log.count_from_log(lake.uri("t")) == 4
    # A predicate on data columns is not a fact of the log: the query answers it.
    assert log.count_from_log(lake.uri("t"), where=eq("device", "b")) is None
    assert lake.partition_files("t", where=eq("day", day[1])) == (2, 4)
    with pytest.raises(LakehouseError, match="names columns that do not partition"):
        lake.partition_files("t", where=And((eq("day", day[1]), eq("device", "b"))))
    lake.append("empty", devices([]), metadata=META, partition_by=["day"])
    assert lake.count("empty", where=between("day", day[0], day[1])) == 0
    assert lake.partition_files("empty", where=eq("day", day[0])) == (0, 0)


def test_counts_of_a_table_with_deletion_vectors_leave_out_the_rows_they_delete(lake):
    """Delta Spark deletes rows of a table with deletion vectors by marking them, and the
    files keep their row counts: the log alone cannot count such a table (delta-rs lists
    no vector's cardinality), so it says so, and a count asks a query, at every version,
    from a checkpoint and from the commits after it, for a file marked twice too."""
    lake.append(
        "t",
        devices([(name, 1 + i % 3, "x") for i, name in enumerate("abcdefghij")]),
        metadata=META,
        partition_by=["day"],
        table_properties={"delta.enableDeletionVectors": "true", "delta.checkpointInterval": "2"},
    )
    spark = lake.on_spark()  # delta-rs's DELETE writes no deletion vectors: Spark's marks
    spark.delete("t", where=eq("device", "a"), metadata=META)
    spark.delete("t", where=eq("device", "b"), metadata=META)  # checkpoint at version 2
    lake.append("t", devices([("z", 2, "y")]), metadata=META)
    spark.delete("t", where=eq("device", "d"), metadata=META)  # a/d share a file: marked again
    log = Path(lake.uri("t")) / "_delta_log"
    assert (log / f"{2:020d}.checkpoint.parquet").exists()
    assert '"deletionVector":{' in (log / f"{4:020d}.json").read_text()
    day = [dt.date(2024, 1, n) for n in range(1, 4)]
    counts = DeltaRsEngine()
    for version in range(5):
        for where in (None, eq("day", day[0]), between("day", day[1], day[2])):
            by_query = lake.read_arrow("t", where=where, version=version).num_rows
            assert counts.count_from_log(lake.uri("t"), where=where, version=version) is None
            assert lake.count("t", where=where, version=version) == by_query
    assert lake.count("t") == 8


def test_overwrite_replaces_everything_in_one_commit(lake):
    lake.append("t", devices([("a", 1, "x"), ("b", 2, "y")]), metadata=META, partition_by=["day"])
    result = lake.overwrite("t", devices([("c", 3, "z")]), metadata=META)
    assert result.version == 1
    assert result.metrics["files_removed"] >= 1
    # The rows it replaced, counted from the version before it.
    assert (result.metrics["rows_inserted"], result.metrics["rows_deleted"]) == (1, 2)
    assert rows(lake, "t") == [("c", 3, "z")]


def test_overwrite_with_a_predicate_replaces_exactly_that_window(lake):
    lake.append(
        "t",
        devices([("a", 1, "x"), ("b", 2, "y"), ("c", 2, "v")]),
        metadata=META,
        partition_by=["day"],
    )
    day2 = eq("day", dt.date(2024, 1, 2))
    result = lake.overwrite("t", devices([("b", 2, "Y")]), where=day2, metadata=META)
    assert rows(lake, "t") == [("a", 1, "x"), ("b", 2, "Y")]
    assert {k: result.metrics[k] for k in ("rows_inserted", "rows_deleted", "rows_copied")} == {
        "rows_inserted": 1,
        "rows_deleted": 2,
        "rows_copied": 0,
    }
    assert lake.count_from_log("t", where=day2, version=0) == 2
    assert lake.count_from_log("t", where=day2) == 1


def test_an_overwrite_on_a_data_column_counts_only_the_rows_it_writes(lake):
    lake.append("t", devices([("a", 1, "x"), ("b", 1, "y"), ("c", 1, "v")]), metadata=META)
    result = lake.overwrite(
        "t",
        devices([("b", 1, "Y"), ("d", 1, "w")]),
        where=is_in("device", ["b", "d"]),
        metadata=META,
    )
    assert rows(lake, "t") == [("a", 1, "x"), ("b", 1, "Y"), ("c", 1, "v"), ("d", 1, "w")]
    # Not the rows copied out of the file it rewrote (a and c): both engines say 2.
    assert result.metrics["rows_inserted"] == 2


def test_an_overwrite_replaces_the_schema_only_when_asked(lake):
    lake.append("t", devices([("a", 1, "x")]), metadata=META)
    hashed = pa.table({"key": pa.array([7], pa.int64()), "day": [dt.date(2024, 1, 1)]})
    with pytest.raises(Exception, match="(?i)schema"):
        lake.overwrite("t", hashed, metadata=META)
    with pytest.raises(ValueError, match="whole-table"):
        lake.overwrite(
            "t", hashed, where=eq("day", dt.date(2024, 1, 1)), metadata=META, replace_schema=True
        )
    assert rows(lake, "t") == [("a", 1, "x")]
    result = lake.overwrite(
        "t", hashed, metadata=META, replace_schema=True, app_transaction=AppTransaction("i", 1)
    )
    assert [(c.name, c.type) for c in lake.table_facts("t").columns] == [
        ("key", "long"),
        ("day", "date"),
    ]
    assert lake.read_arrow("t").to_pylist() == [{"key": 7, "day": dt.date(2024, 1, 1)}]
    assert lake.app_transaction_version("t", "i") == 1 == result.version
    assert rows(lake, "t", version=0) == [("a", 1, "x")]


def test_a_read_computes_the_sha256_of_a_text_column(lake):
    lake.append("t", devices([("it's", 1, "x"), ("é/b", 2, "y")]), metadata=META)
    read = lake.read_arrow("t", columns=["device"], computed={"digest": Sha256("device")})
    assert read.column_names == ["device", "digest"]
    assert {r["device"]: r["digest"] for r in read.to_pylist()} == {
        d: hashlib.sha256(d.encode()).digest() for d in ("it's", "é/b")
    }
    with pytest.raises(PredicateError, match="plain identifier"):
        lake.read_arrow("t", columns=["device"], computed={"a b": Sha256("device")})


def test_merge_schema_adds_new_columns_to_appends_and_replaced_windows(lake):
    lake.append("t", devices([("a", 1, "x"), ("b", 2, "y")]), metadata=META, partition_by=["day"])
    tagged = devices([("c", 1, "z")]).append_column("tag", pa.array(["new"], pa.string()))
    with pytest.raises(Exception, match="(?i)schema"):
        lake.append("t", tagged, metadata=META)
    lake.append("t", tagged, metadata=META, merge_schema=True)
    replaced = devices([("d", 2, "w")]).append_column("tag", pa.array(["two"], pa.string()))
    lake.overwrite(
        "t", replaced, where=eq("day", dt.date(2024, 1, 2)), metadata=META, merge_schema=True
    )
    assert {c.name for c in lake.table_facts("t").columns} == {"device", "day", "name", "tag"}
    got = sorted((r["device"], r["tag"]) for r in lake.read_arrow("t").to_pylist())
    assert got == [("a", None), ("c", "new"), ("d", "two")]


def test_columns_are_the_delta_schema(lake):
    lake.append("t", devices([("a", 1, "x")]), metadata=META, partition_by=["day"])
    assert [(c.name, c.type) for c in lake.table_facts("t").columns] == [
        ("device", "string"),
        ("day", "date"),
        ("name", "string"),
    ]


def test_table_facts_are_the_schema_and_counts_of_one_snapshot(lake):
    assert lake.table_facts("t") is None
    lake.append(
        "t",
        devices([("a", 1, "x"), ("b", 2, "y"), ("c", 2, "z")]),
        metadata=META,
        partition_by=["day"],
    )
    day2 = eq("day", dt.date(2024, 1, 2))
    facts = lake.table_facts("t", where=day2)
    assert (facts.version, facts.rows, facts.selected_rows) == (0, 3, 2)
    assert [c.name for c in facts.columns] == ["device", "day", "name"]
    # A predicate on data columns is not a fact of the log.
    assert lake.table_facts("t", where=eq("device", "a")).selected_rows is None
    assert lake.table_facts("t").selected_rows is None


def test_typed_merge_conditions_and_assignments_mean_the_same_on_both_engines(lake):
    """The join pinned to a slice of the target, a lexicographic newer-wins, a comparison
    with a quoted value, constants (a quote and a backslash among them) and a boolean
    expression as a value, all rendered by the engine."""
    table = pa.table(
        {
            "k": ["a", "b", "c", "z"],
            "day": pa.array([dt.date(2024, 1, d) for d in (1, 1, 1, 2)], pa.date32()),
            "v": pa.array([1, 5, 1, 1], pa.int64()),
            "tie": pa.array([1, 1, 1, 1], pa.int64()),
            "state": ["it's open", "it's open", "it's done", "it's open"],
            "flag": [True, True, True, True],
        }
    )
    lake.append("m", table, metadata=META)
    source = pa.table(
        {
            "k": ["a", "b", "c", "z", "n"],
            "day": pa.array([dt.date(2024, 1, d) for d in (1, 1, 1, 2, 1)], pa.date32()),
            "v": pa.array([1, 4, 9, 9, 7], pa.int64()),
            "tie": pa.array([2, 9, 2, 2, 0], pa.int64()),
            "state": ["s", "s", "s", "s", "new"],
            "flag": [False, False, False, False, True],
        }
    )
    lake.merge(
        "m",
        source,
        # "z" lies outside the pinned day: it is not matched, and not inserted either.
        on=eq("t.day", dt.date(2024, 1, 1)) & matches("k", "day"),
        clauses=[
            WhenMatchedUpdate(
                condition=SortsAfter(("v", "tie")) & Compare("t.state", "<>", "it's done"),
                set={
                    **from_source(["v", "tie"]),
                    "state": Constant("won't \\ wait"),
                    "flag": IsTrue("t.flag") & Not(IsTrue("s.flag")),
                },
            ),
            WhenNotMatchedInsert(condition=Compare("s.day", "=", dt.date(2024, 1, 1))),
        ],
        metadata=META,
    )
    got = {
        r["k"]: (r["v"], r["tie"], r["state"], r["flag"]) for r in lake.read_arrow("m").to_pylist()
    }
    assert got == {
        "a": (1, 2, "won't \\ wait", True),  # a newer tie-breaker wins
        "b": (5, 1, "it's open", True),  # an older version loses
        "c": (1, 1, "it's done", True),  # the condition on the target's state holds it
        "z": (1, 1, "it's open", True),
        "n": (7, 0, "new", True),
    }


def test_merge_applies_conditional_clauses_in_order(lake):
    lake.append("t", devices([("a", 1, "x"), ("b", 1, "y"), ("c", 1, "z")]), metadata=META)
    source = pa.table(
        {
            "device": ["a", "b", "d", "e"],
            "day": pa.array([dt.date(2024, 1, 1)] * 4, pa.date32()),
            "name": ["x2", "y2", "w", "gone"],
            "deleted": [False, True, False, True],
        }
    )
    result = lake.merge(
        "t",
        source,
        on=matches("device"),
        clauses=[
            WhenMatchedDelete(condition=IsTrue("s.deleted")),
            WhenMatchedUpdate(set=from_source(["name"])),
            WhenNotMatchedInsert(
                condition=Not(IsTrue("s.deleted")), values=from_source(["device", "day", "name"])
            ),
        ],
        metadata=META,
    )
    assert rows(lake, "t") == [("a", 1, "x2"), ("c", 1, "z"), ("d", 1, "w")]
    assert (result.metrics["rows_inserted"], result.metrics["rows_updated"]) == (1, 1)
    assert result.metrics["rows_deleted"] == 1


def test_delete_with_a_predicate(lake):
    lake.append("t", devices([("a", 1, "x"), ("b", 2, "y")]), metadata=META)
    result = lake.delete("t", where=eq("device", "a"), metadata=META)
    assert result.metrics["rows_deleted"] == 1
    assert rows(lake, "t") == [("b", 2, "y")]


def test_restore_brings_back_an_earlier_version_as_a_new_commit(lake):
    lake.append("t", devices([("a", 1, "x")]), metadata=META)
    lake.overwrite("t", devices([("b", 2, "y")]), metadata=META)
    result = lake.restore("t", 0, metadata=META)
    assert result.version == 2
    assert rows(lake, "t") == [("a", 1, "x")]


def test_restore_where_moves_only_the_rows_it_names(lake):
    """One day back to an earlier version while the other day keeps its later commit; a
    day the version did not hold is emptied."""
    day = [dt.date(2024, 1, d) for d in (1, 2, 3)]
    lake.append("t", devices([("a", 1, "x"), ("b", 2, "y")]), metadata=META, partition_by=["day"])
    lake.overwrite("t", devices([("a", 1, "x2")]), where=eq("day", day[0]), metadata=META)
    lake.overwrite("t", devices([("b", 2, "y2")]), where=eq("day", day[1]), metadata=META)
    lake.append("t", devices([("c", 3, "z")]), metadata=META)
    result = lake.restore_where("t", 0, where=eq("day", day[0]), metadata=META)
    assert result.version == 4
    assert rows(lake, "t") == [("a", 1, "x"), ("b", 2, "y2"), ("c", 3, "z")]
    lake.restore_where("t", 0, where=eq("day", day[2]), metadata=META)
    assert rows(lake, "t") == [("a", 1, "x"), ("b", 2, "y2")]


def test_the_change_feed_names_the_rows_each_commit_changed(lake):
    """What a follower of a table reads instead of the table: each commit's changed rows,
    whichever engine wrote them, a restore included."""
    feed = {"delta.enableChangeDataFeed": "true"}
    lake.append("t", devices([("a", 1, "x"), ("b", 2, "y")]), metadata=META, table_properties=feed)
    lake.merge(
        "t",
        devices([("a", 1, "x2"), ("c", 3, "z")]),
        on=matches("device"),
        clauses=[WhenMatchedUpdate(), WhenNotMatchedInsert()],
        metadata=META,
    )
    lake.delete("t", where=eq("device", "b"), metadata=META)
    lake.restore("t", 1, metadata=META)

    def changed(after: int, until: int) -> list[tuple]:
        rows = lake.changes("t", after=after, until=until).to_pylist()
        return sorted(
            (r["_commit_version"], r["_change_type"], r["device"], r["name"]) for r in rows
        )

    assert changed(0, 1) == [
        (1, "insert", "c", "z"),
        (1, "update_postimage", "a", "x2"),
        (1, "update_preimage", "a", "x"),
    ]
    assert changed(1, 2) == [(2, "delete", "b", "y")]
    restored = changed(2, 3)
    inserted = sorted(r[2:] for r in restored if r[1] == "insert")
    deleted = sorted(r[2:] for r in restored if r[1] == "delete")
    # A restore swaps files: the rows of the files it removes, and of those it brings back.
    assert [r for r in inserted if r not in deleted] == [("b", "y")]


def test_without_a_feed_the_changes_are_the_rows_of_the_files_each_commit_swapped(lake):
    """A table made before its feed was enabled: a follower still gets what each commit
    removed and added, the changed rows among the rows copied along with them."""
    lake.append("t", devices([("a", 1, "x"), ("b", 2, "y")]), metadata=META)
    lake.merge(
        "t",
        devices([("a", 1, "x2")]),
        on=matches("device"),
        clauses=[WhenMatchedUpdate()],
        metadata=META,
    )
    changes = lake.changes("t", after=0, until=1).to_pylist()
    removed = sorted((r["device"], r["name"]) for r in changes if r["_change_type"] == "delete")
    added = sorted((r["device"], r["name"]) for r in changes if r["_change_type"] == "insert")
    assert ("a", "x") in removed and ("a", "x2") in added
    assert sorted(set(added) - set(removed)) == [("a", "x2")]


def test_changes_whose_files_were_vacuumed_are_refused_by_name(lake):
    lake.append("t", devices([("a", 1, "x")]), metadata=META)
    lake.overwrite("t", devices([("b", 2, "y")]), metadata=META)
    lake.vacuum("t", retention_hours=0)
    with pytest.raises(ChangesUnavailableError, match="'.*t'.*after version 0 up to 1"):
        lake.changes("t", after=0, until=1)


def test_history_returns_commit_metadata_newest_first(lake):
    lake.append("t", devices([("a", 1, "x")]), metadata={**META, "partition_key": "2024-01-01"})
    lake.overwrite("t", devices([("b", 2, "y")]), metadata={**META, "source_digest": "abc"})
    history = lake.history("t")
    assert [h.version for h in history] == [1, 0]
    assert history[0].metadata["source_digest"] == "abc"
    assert history[1].metadata["partition_key"] == "2024-01-01"
    assert history[0].metadata["dagster_run_id"] == "test-run"


def test_app_transaction_version_commits_with_the_data(lake):
    assert lake.app_transaction_version("t", "loader") is None
    lake.append(
        "t", devices([("a", 1, "x")]), metadata=META, app_transaction=AppTransaction("loader", 7)
    )
    lake.append(
        "t", devices([("b", 1, "y")]), metadata=META, app_transaction=AppTransaction("other", 1)
    )
    assert lake.app_transaction_version("t", "loader") == 7
    assert lake.app_transaction_version("t", "other") == 1
    assert lake.app_transaction_versions("t", ["loader", "other", "never"]) == {
        "loader": 7,
        "other": 1,
    }


def test_a_stale_writer_is_refused_and_writes_nothing(lake):
    """Two writers read sequence 3; the first commits 4. The second, still carrying 4
    (its view predates that commit), must fail rather than clobber the first's rows."""
    lake.append(
        "t", devices([("a", 1, "v3")]), metadata=META, app_transaction=AppTransaction("s", 3)
    )
    lake.overwrite(
        "t",
        devices([("a", 1, "fresh")]),
        where=eq("device", "a"),
        metadata=META,
        app_transaction=AppTransaction("s", 4),
    )
    version = lake.version("t")
    with pytest.raises(StaleWriteError, match="'s' is already at version 4"):
        lake.overwrite(
            "t",
            devices([("a", 1, "stale")]),
            where=eq("device", "a"),
            metadata=META,
            app_transaction=AppTransaction("s", 4),
        )
    with pytest.raises(StaleWriteError):
        lake.merge(
            "t",
            devices([("a", 1, "stale")]),
            on=matches("device"),
            clauses=[WhenMatchedUpdate()],
            metadata=META,
            app_transaction=AppTransaction("s", 2),
        )
    assert lake.version("t") == version
    assert rows(lake, "t") == [("a", 1, "fresh")]


def test_a_writer_sees_an_app_transaction_another_writer_committed_since_it_looked(lake):
    """A writer that looked an app id up, and committed since, is still refused once
    another writer (another process: its own engine) has advanced that app id."""
    lake.append(
        "t", devices([("a", 1, "v1")]), metadata=META, app_transaction=AppTransaction("s", 1)
    )
    assert lake.app_transaction_version("t", "s") == 1
    lake.append(
        "t", devices([("b", 1, "v1")]), metadata=META, app_transaction=AppTransaction("u", 1)
    )
    other = Lakehouse(root=lake.root, engine=lake.engine, spark=lake.spark)
    other.append(
        "t", devices([("a", 2, "other")]), metadata=META, app_transaction=AppTransaction("s", 2)
    )
    with pytest.raises(StaleWriteError, match="'s' is already at version 2"):
        lake.append(
            "t", devices([("a", 2, "late")]), metadata=META, app_transaction=AppTransaction("s", 2)
        )
    assert lake.app_transaction_versions("t", ["s", "u"]) == {"s": 2, "u": 1}
    assert rows(lake, "t") == [("a", 1, "v1"), ("a", 2, "other"), ("b", 1, "v1")]


# The snapshot a write follows is delta-rs's (delta-spark asks Spark's log each time; its
# races are `test_concurrent_writers_conflict_retry_and_no_commit_is_lost`'s): the
# delta-spark half, 16 s, runs in make test-slow.
@pytest.mark.long_on_delta_spark
def test_a_writer_following_its_own_commits_still_replaces_what_another_wrote_since(lake):
    """A writer's next write or merge commits on the snapshot its last commit left,
    without looking for newer commits first (delta-rs): another writer's commits since
    then are checked as it commits. One that replaced the same partition makes it commit
    again on the latest snapshot, so no row of it is kept twice; one elsewhere is kept."""
    day = eq("day", dt.date(2024, 1, 1))
    lake.overwrite("t", devices([("a", 1, "mine")]), where=day, metadata=META)
    other = Lakehouse(root=lake.root, engine=lake.engine, spark=lake.spark)
    other.overwrite("t", devices([("a", 1, "theirs")]), where=day, metadata=META)
    other.append("t", devices([("b", 2, "theirs")]), metadata=META)
    lake.overwrite("t", devices([("a", 1, "mine again")]), where=day, metadata=META)
    assert rows(lake, "t") == [("a", 1, "mine again"), ("b", 2, "theirs")]
    other.merge(
        "t",
        devices([("a", 1, "merged")]),
        on=matches("device"),
        clauses=[WhenMatchedUpdate()],
        metadata=META,
    )
    lake.merge(
        "t",
        devices([("a", 1, "merged again"), ("c", 1, "new")]),
        on=matches("device"),
        clauses=[WhenMatchedUpdate(), WhenNotMatchedInsert()],
        metadata=META,
    )
    assert rows(lake, "t") == [("a", 1, "merged again"), ("b", 2, "theirs"), ("c", 1, "new")]
    assert lake.version("t") == 5


def test_vacuum_removes_replaced_files_and_restore_then_refuses(lake):
    lake.append("t", devices([("a", 1, "x")]), metadata=META)
    lake.overwrite("t", devices([("b", 2, "y")]), metadata=META)
    assert len(lake.vacuum("t", retention_hours=0, dry_run=True)) == 1
    removed = lake.vacuum("t", retention_hours=0)
    assert len(removed) == 1
    assert rows(lake, "t") == [("b", 2, "y")]
    before = lake.version("t")
    with pytest.raises(VersionUnavailableError, match="version 0 of Delta table 't'.*VACUUM"):
        lake.restore("t", 0, metadata=META)
    assert lake.version("t") == before


def test_vacuum_keeps_the_deletion_vectors_the_table_still_reads(lake):
    """A file marked twice has a new vector each time; vacuum must keep the one the
    table reads (delta-rs's `full` mode deletes it too: the table then fails to read)."""
    lake.append(
        "t",
        devices([("a", 1, "x"), ("b", 1, "x"), ("c", 1, "x")]),
        metadata=META,
        table_properties={"delta.enableDeletionVectors": "true"},
    )
    spark = lake.on_spark()  # delta-rs's DELETE writes no deletion vectors: Spark's marks
    spark.delete("t", where=eq("device", "a"), metadata=META)
    spark.delete("t", where=eq("device", "b"), metadata=META)
    assert (
        '"deletionVector":{' in (Path(lake.uri("t")) / "_delta_log" / f"{2:020d}.json").read_text()
    )
    lake.vacuum("t", retention_hours=0)
    assert rows(lake, "t") == [("c", 1, "x")]
    assert lake.count("t") == 1


def test_vacuum_retention_is_whole_hours_on_both_engines(lake):
    lake.append("t", devices([("a", 1, "x")]), metadata=META)
    lake.overwrite("t", devices([("b", 2, "y")]), metadata=META)
    # The file replaced a moment ago is younger than an hour: kept, on either engine.
    assert lake.vacuum("t", retention_hours=1, dry_run=True) == []
    for wrong in (0.5, -1, True):
        with pytest.raises(ValueError, match="retention_hours"):
            lake.vacuum("t", retention_hours=wrong)
    assert len(lake.vacuum("t", retention_hours=0, dry_run=True)) == 1


def test_compact_rewrites_small_files_without_changing_content(lake):
    for i in range(4):
        lake.append("t", devices([(f"d{i}", 1, "x")]), metadata=META, partition_by=["day"])
    result = lake.compact("t", partition={"day": dt.date(2024, 1, 1)}, metadata=META)
    assert result.metrics["files_removed"] == 4
    assert result.metrics["files_added"] == 1
    assert len(rows(lake, "t")) == 4


def test_a_quote_in_a_value_neither_breaks_nor_widens_a_predicate(lake):
    keys = ["o'brien", "o", "x' OR '1'='1", "back\\slash", "o''brien"]
    lake.append("t", devices([(k, 1, k) for k in keys]), metadata=META)
    for key in keys:
        assert rows(lake, "t", where=eq("device", key)) == [(key, 1, key)]
    lake.delete("t", where=is_in("device", ["x' OR '1'='1"]), metadata=META)
    assert sorted(r[0] for r in rows(lake, "t")) == sorted(k for k in keys if k != "x' OR '1'='1")
    lake.overwrite(
        "t", devices([("o'brien", 1, "new")]), where=eq("device", "o'brien"), metadata=META
    )
    assert rows(lake, "t", where=eq("name", "new")) == [("o'brien", 1, "new")]
    assert len(rows(lake, "t")) == 4


def test_concurrent_writers_conflict_retry_and_no_commit_is_lost(lake):
    """Writers racing on one partition (and on others) all land: a writer that loses the
    optimistic-concurrency race re-runs against the new snapshot."""
    lake.append("t", devices([("seed", 1, "s")]), metadata=META, partition_by=["day"])
    errors: list[BaseException] = []

    def writer(day: int, n: int) -> None:
        try:
            for i in range(n):
                lake.overwrite(
                    "t",
                    devices([(f"w{day}", day, f"{i}")]),
                    where=eq("day", dt.date(2024, 1, day)),
                    metadata=META,
                )
        except BaseException as error:  # noqa: BLE001 - asserted below
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(day, 4)) for day in (2, 2, 2, 3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert lake.version("t") == 16
    assert [r[0] for r in rows(lake, "t")] == ["seed", "w2", "w3"]
    assert len({h.metadata["commit_token"] for h in lake.history("t")}) == 17


def test_rows_spooled_from_a_table_are_written_whole_and_again_when_a_commit_is_retried(lake):
    """Rows computed from a table are spooled to local disk before the write (delta-rs
    pulls a stream from inside its runtime, where reading a table would fail or, with
    two writers in one process, hang), and a writer that loses a commit race writes
    them once more from the spool."""
    lake.append("src", devices([("a", 2, "x"), ("b", 2, "y")]), metadata=META)
    lake.append("t", devices([("seed", 1, "s")]), metadata=META, partition_by=["day"])
    inserted: list[int] = []
    errors: list[BaseException] = []
    schema = devices([]).schema

    def writer() -> None:
        try:
            for _ in range(3):
                batches = lake.read_arrow("src").cast(schema).to_batches(max_chunksize=1)
                with spooled(schema, batches) as stream:
                    result = lake.overwrite(
                        "t", stream, where=eq("day", dt.date(2024, 1, 2)), metadata=META
                    )
                inserted.append(result.metrics["rows_inserted"])
        except BaseException as error:  # noqa: BLE001 - asserted below
            errors.append(error)

    threads = [threading.Thread(target=writer) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    assert inserted == [2] * 6
    assert rows(lake, "t") == [("a", 2, "x"), ("b", 2, "y"), ("seed", 1, "s")]


def test_a_failing_stream_commits_nothing_and_raises_its_own_error(lake):
    lake.append("t", devices([("a", 1, "x")]), metadata=META)

    def batches():
        yield from devices([("b", 1, "y")]).to_batches()
        raise ValueError("report.csv line 7: not a number")

    with pytest.raises(Exception, match="report.csv line 7"):
        lake.overwrite("t", Stream.of(devices([]).schema, batches), metadata=META)
    assert lake.version("t") == 0
    assert rows(lake, "t") == [("a", 1, "x")]


def test_table_properties_apply_when_a_write_creates_the_table(lake, tmp_path):
    properties = {"delta.checkpointInterval": "2"}
    lake.append("t", devices([("a", 1, "x")]), metadata=META, table_properties=properties)
    for i in range(3):
        lake.append("t", devices([(f"b{i}", 1, "y")]), metadata=META)
    log = Path(lake.uri("t")) / "_delta_log"
    assert sorted(p.name for p in log.glob("*.checkpoint.parquet"))


def test_every_table_checkpoints_every_ten_commits_unless_its_creator_says_otherwise(lake):
    """Delta Spark's default, written into each table so that both engines (delta-rs's own
    default is 100) keep a snapshot to a checkpoint and a few commits."""
    FEED = {"delta.enableChangeDataFeed": "true"}  # noqa: N806
    for i in range(11):
        lake.append("t", devices([(f"a{i}", 1, "x")]), metadata=META)
    lake.append("u", devices([("a", 1, "x")]), metadata=META, table_properties=FEED)
    own = {"delta.checkpointInterval": "5"}
    lake.append("w", devices([("a", 1, "x")]), metadata=META, table_properties=own)
    settings = {
        table: DeltaTable(lake.uri(table)).metadata().configuration for table in ("t", "u", "w")
    }
    assert settings["t"]["delta.checkpointInterval"] == "10"
    assert settings["u"] == {"delta.checkpointInterval": "10", **FEED}
    assert settings["w"]["delta.checkpointInterval"] == "5"
    # One in eleven commits: delta-rs writes it at version 9, Delta Spark at 10.
    assert len(list((Path(lake.uri("t")) / "_delta_log").glob("*.checkpoint.parquet"))) == 1


def test_delta_rs_cleans_expired_log_files_only_when_it_writes_a_checkpoint(tmp_path):
    """As Delta Spark does: delta-rs would otherwise list and stat the whole log after
    every commit, a cost that grows with the table's history. The table's own settings
    still decide whether and what to clean."""
    lake = Lakehouse(root=str(tmp_path), spark=SparkResource())
    properties = {
        "delta.checkpointInterval": "3",
        "delta.logRetentionDuration": "interval 0 seconds",
    }
    log = Path(lake.uri("t")) / "_delta_log"

    def commits() -> list[int]:
        return sorted(int(p.name.split(".")[0]) for p in log.glob("*.json"))

    lake.append("t", devices([("a", 1, "x")]), metadata=META, table_properties=properties)
    for i in range(2):
        lake.append("t", devices([(f"b{i}", 1, "y")]), metadata=META)
    assert commits() == [0, 1, 2]  # no checkpoint yet: nothing cleaned
    lake.overwrite("t", devices([("c", 1, "z")]), metadata=META)  # version 3: a checkpoint
    assert commits() == [2, 3]  # delta-rs keeps the commit before the checkpoint
    lake.append("t", devices([("d", 1, "z")]), metadata=META)
    assert commits() == [2, 3, 4]
    assert rows(lake, "t") == [("c", 1, "z"), ("d", 1, "z")]

    kept = {**properties, "delta.enableExpiredLogCleanup": "false"}
    lake.append("u", devices([("a", 1, "x")]), metadata=META, table_properties=kept)
    for i in range(4):
        lake.append("u", devices([(f"b{i}", 1, "y")]), metadata=META)
    assert len(list((Path(lake.uri("u")) / "_delta_log").glob("*.json"))) == 5


def race_to_create(lake, table: str, days: list[int]) -> list[BaseException]:
    """Writers released at once against a table that does not exist yet."""
    barrier = threading.Barrier(len(days))
    errors: list[BaseException] = []

    def writer(day: int) -> None:
        try:
            barrier.wait()
            lake.overwrite(
                table,
                devices([(f"w{day}", day, "x")]),
                where=eq("day", dt.date(2024, 1, day)),
                partition_by=["day"],
                metadata=META,
            )
        except BaseException as error:  # noqa: BLE001 - returned to the test
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(day,)) for day in days]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_writers_racing_to_create_a_table_each_replace_only_their_window(lake):
    """Guards: a writer that saw no table, found one at commit time (a concurrent writer
    created it) and overwrote the whole table instead of its own partition."""
    for attempt in range(3):
        assert race_to_create(lake, f"race{attempt}", [1, 2, 3, 4]) == []
        assert [r[0] for r in rows(lake, f"race{attempt}")] == ["w1", "w2", "w3", "w4"]


def versions(rows: list[tuple[str, int, int | None, str]]) -> pa.Table:
    """Versions of keys: (key, day of January 2024, at, name)."""
    return pa.table(
        {
            "key": pa.array([r[0] for r in rows], pa.string()),
            "day": pa.array([dt.date(2024, 1, r[1]) for r in rows], pa.date32()),
            "at": pa.array([r[2] for r in rows], pa.int64()),
            "name": pa.array([r[3] for r in rows], pa.string()),
        }
    )


def kept(lake: Lakehouse, table: str) -> list[tuple]:
    data = lake.read_arrow(table).to_pylist()
    return sorted((r["key"], r["day"].day, r["at"], r["name"]) for r in data)


def by_spark(lake: Lakehouse, table: str) -> list[tuple]:
    frame = lake.spark.session().read.format("delta").load(lake.uri(table))
    return sorted((r.key, r.day.day, r.at, r.name) for r in frame.collect())


def upsert(lake: Lakehouse, table: str, batch: list, days: list[int]):
    """The newest-wins MERGE of the warehouse publish: by `key`, in the days named, a
    row replaces the one it sorts after by (`at`, `name`) and is inserted where none of
    its key is."""
    days_named = tuple(dt.date(2024, 1, d) for d in days)
    return lake.merge(
        table,
        versions(batch),
        on=is_in("t.day", days_named) & matches("key"),
        clauses=[WhenMatchedUpdate(condition=SortsAfter(("at", "name"))), WhenNotMatchedInsert()],
        metadata=META,
    )


DELETION_VECTORS = {"delta.enableDeletionVectors": "true", "delta.checkpointInterval": "2"}


@pytest.mark.parametrize("marks", [True, False], ids=["deletion-vectors", "copy-on-write"])
def test_a_newest_wins_merge_keeps_per_key_the_version_that_sorts_last(lake, marks):
    """Each source row replaces the row of its key it sorts after (by `at`, then `name`;
    a NULL never sorts after), in the partitions named; it is dropped where the stored
    row sorts after it or equals it, and inserted where no named partition holds its
    key. On a table with deletion vectors Delta Spark marks the replaced rows and their
    files stay; delta-rs (which cannot write vectors yet), and either engine without
    them, copies their files. Spark reads what delta-rs reads, and counts stay exact."""
    lake.append(
        "v",
        versions(
            [
                ("k1", 1, 5, "a"),
                ("k2", 1, 5, "a"),
                ("k3", 2, 5, "a"),
                ("k4", 2, None, "a"),
                ("k5", 3, 5, "a"),
                ("k7", 2, 5, "a"),
            ]
        ),
        metadata=META,
        partition_by=["day"],
        table_properties=DELETION_VECTORS if marks else None,
    )
    before = set(DeltaTable(lake.uri("v")).file_uris())
    batch = [
        ("k1", 4, 6, "a"),  # newer: moves from day 1 to day 4
        ("k2", 4, 4, "z"),  # older: dropped
        ("k3", 4, 5, "b"),  # equal time, later name: moves
        ("k4", 4, 7, "a"),  # the stored `at` is NULL: dropped
        ("k5", 4, 9, "a"),  # day 3 is not named: inserted
        ("k6", 4, 1, "a"),  # new
        ("k7", 2, 5, "a"),  # identical: dropped
    ]
    result = upsert(lake, "v", batch, days=[1, 2, 4])
    expected = [
        ("k1", 4, 6, "a"),
        ("k2", 1, 5, "a"),
        ("k3", 4, 5, "b"),
        ("k4", 2, None, "a"),
        ("k5", 3, 5, "a"),
        ("k5", 4, 9, "a"),
        ("k6", 4, 1, "a"),
        ("k7", 2, 5, "a"),
    ]
    assert kept(lake, "v") == by_spark(lake, "v") == expected
    assert (result.metrics["rows_updated"], result.metrics["rows_inserted"]) == (2, 2)
    marked = marks and lake.engine == "delta-spark"
    assert result.metrics["files_marked"] == (2 if marked else 0)  # day 1's file and day 2's
    commit = Path(lake.uri("v")) / "_delta_log" / f"{result.version:020d}.json"
    assert ('"deletionVector":{' in commit.read_text()) == marked
    assert (before <= set(DeltaTable(lake.uri("v")).file_uris())) == marked
    assert lake.count("v") == len(expected)
    assert upsert(lake, "v", batch, days=[1, 2, 4]).metrics["rows_updated"] == 0
    assert kept(lake, "v") == expected


def test_rows_replaced_by_either_engine_stay_gone_through_checkpoints_compaction_and_vacuum(
    lake,
):
    """A file that loses rows three times, by either engine in turn (the second MERGE is
    Delta Spark's, which marks the row; the others the lakehouse's engine's): a
    checkpoint holds what each did (a table opened anew from it reads the same);
    compaction drops the marked rows for good and vacuum keeps every vector the table
    still reads."""
    lake.append(
        "v",
        versions([(f"k{i}", 1, 1, "a") for i in range(6)]),
        metadata=META,
        partition_by=["day"],
        table_properties=DELETION_VECTORS,
    )
    for step, (writer, key) in enumerate(
        ((lake, "k0"), (lake.on_spark(), "k3"), (lake, "k4")), start=2
    ):
        replaced = upsert(writer, "v", [(key, step, 2, "b")], days=[1, step])
        assert replaced.metrics["rows_updated"] == 1
    expected = sorted(
        [("k0", 2, 2, "b"), ("k3", 3, 2, "b"), ("k4", 4, 2, "b")]
        + [(f"k{i}", 1, 1, "a") for i in (1, 2, 5)]
    )
    log = Path(lake.uri("v")) / "_delta_log"
    assert (log / f"{2:020d}.checkpoint.parquet").exists()
    assert kept(lake, "v") == by_spark(lake, "v") == expected
    fresh = Lakehouse(root=lake.root, engine=lake.engine, spark=lake.spark)
    assert kept(fresh, "v") == expected and fresh.count("v") == 6
    lake.vacuum("v", retention_hours=0)
    assert kept(lake, "v") == expected
    lake.compact("v", metadata=META)
    lake.vacuum("v", retention_hours=0)
    assert kept(lake, "v") == by_spark(lake, "v") == expected
    assert lake.count("v") == 6


def test_concurrent_upserts_conflict_retry_and_none_is_lost(lake):
    """Newest-wins MERGEs racing into the same partitions all land: one that loses the
    race to its commit's version is made again on the newer snapshot."""
    lake.append(
        "v",
        versions([(f"k{i}", 1, 1, "a") for i in range(8)]),
        metadata=META,
        partition_by=["day"],
        table_properties=DELETION_VECTORS,
    )
    errors: list[BaseException] = []

    def writer(keys: list[int]) -> None:
        try:
            for i in keys:
                upsert(lake, "v", [(f"k{i}", 2, 2, "b")], days=[1, 2])
        except BaseException as error:  # noqa: BLE001 - asserted below
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(keys,)) for keys in ([0, 1, 2], [3, 4, 5])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    expected = sorted(
        [(f"k{i}", 2, 2, "b") for i in range(6)] + [(f"k{i}", 1, 1, "a") for i in (6, 7)]
    )
    assert kept(lake, "v") == by_spark(lake, "v") == expected
    assert lake.count("v") == 8
