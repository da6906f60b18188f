"""The Delta port on an S3-compatible object store (moto's server on loopback), per engine:
the operations patterns use, commit metadata, vacuum and the restore refusal that
depends on seeing which files storage still holds."""

from __future__ import annotations

import datetime as dt
import uuid

import partition_writer
import pyarrow as pa
import pytest
import servers

from resources import Lakehouse
from resources.lakehouse import (
    AppTransaction,
    StaleWriteError,
    VersionUnavailableError,
    WhenMatchedUpdate,
    WhenNotMatchedInsert,
)
from resources.lakehouse.predicates import SortsAfter, eq, is_in, matches
from resources.object_store import S3Lakehouse

META = {"dagster_run_id": "s3-test", "asset_key": "t", "partition_key": None}


def days(rows: list[tuple[int, str]]) -> pa.Table:
    return pa.table(
        {
            "day": pa.array([dt.date(2024, 1, d) for d, _ in rows], pa.date32()),
            "name": pa.array([n for _, n in rows], pa.string()),
        }
    )


def content(lake: Lakehouse, table: str = "t", **kwargs) -> list[tuple[int, str]]:
    return sorted((r["day"].day, r["name"]) for r in lake.read_arrow(table, **kwargs).to_pylist())


def test_the_port_round_trips_on_the_object_store(s3_lakehouse: Lakehouse):
    lake = s3_lakehouse
    assert lake.uri("t").startswith("s3://")
    lake.append("t", days([(1, "a"), (2, "b")]), metadata=META, partition_by=["day"])
    lake.overwrite("t", days([(2, "B")]), where=eq("day", dt.date(2024, 1, 2)), metadata=META)
    merged = lake.merge(
        "t",
        days([(2, "B2"), (3, "c")]),
        on=matches("day"),
        clauses=[WhenMatchedUpdate(), WhenNotMatchedInsert()],
        metadata={**META, "source_digest": "abc"},
        app_transaction=AppTransaction("loader", 1),
    )
    assert (merged.metrics["rows_updated"], merged.metrics["rows_inserted"]) == (1, 1)
    assert content(lake) == [(1, "a"), (2, "B2"), (3, "c")]
    assert lake.count("t", where=eq("day", dt.date(2024, 1, 3))) == 1
    assert lake.read("t", where=eq("name", "a")).count() == 1
    with pytest.raises(StaleWriteError):
        lake.append(
            "t", days([(9, "x")]), metadata=META, app_transaction=AppTransaction("loader", 1)
        )

    lake.delete("t", where=eq("day", dt.date(2024, 1, 1)), metadata=META)
    assert lake.restore("t", 2, metadata=META).version == 4
    assert content(lake) == [(1, "a"), (2, "B2"), (3, "c")]
    history = lake.history("t")
    assert [h.version for h in history] == [4, 3, 2, 1, 0]
    assert history[2].metadata["source_digest"] == "abc"
    assert lake.app_transaction_version("t", "loader") == 1

    assert lake.vacuum("t", retention_hours=0)
    assert lake.missing_files("t", 0)
    with pytest.raises(VersionUnavailableError, match="VACUUM"):
        lake.restore("t", 0, metadata=META)
    assert content(lake) == [(1, "a"), (2, "B2"), (3, "c")]

    assert lake.drop("t") and not lake.exists("t")


def test_writer_processes_committing_to_one_s3_table_lose_no_commit(s3_endpoint, s3_storage, spark):
    """delta-rs commits on S3 with conditional writes: processes racing for the next
    version of one table each get their own, and every commit lands."""
    bucket = f"race-{uuid.uuid4().hex[:12]}"
    servers.create_bucket(s3_endpoint, bucket)
    lake = S3Lakehouse(
        root=f"s3://{bucket}/lakehouse", engine="delta-rs", spark=spark, s3=s3_storage
    )
    partition_writer.race(lake, s3_endpoint, engine="delta-rs")


def test_a_newest_wins_merge_on_the_object_store(s3_lakehouse: Lakehouse):
    """The newest-wins MERGE of the warehouse publish, on a table with deletion vectors
    in the object store: the same result whichever engine (Delta Spark marks the row,
    delta-rs copies its file)."""
    lake = s3_lakehouse
    lake.append(
        "u",
        days([(1, "a"), (2, "b")]),
        metadata=META,
        partition_by=["day"],
        table_properties={"delta.enableDeletionVectors": "true"},
    )
    named = (dt.date(2024, 1, 1), dt.date(2024, 1, 3))
    result = lake.merge(
        "u",
        days([(1, "z"), (3, "c")]),
        on=is_in("t.day", named) & matches("day"),
        clauses=[WhenMatchedUpdate(condition=SortsAfter(("name",))), WhenNotMatchedInsert()],
        metadata=META,
    )
    assert (result.metrics["rows_updated"], result.metrics["rows_inserted"]) == (1, 1)
    assert content(lake, "u") == [(1, "z"), (2, "b"), (3, "c")]
