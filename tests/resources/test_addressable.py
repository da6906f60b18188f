"""Rows picked out of Parquet files by a column's values (`resources.lakehouse.addressable`):
the same rows from files written addressable (values read in place) as from any other
Parquet file (read whole), sorted or not."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from resources import Lakehouse
from resources.lakehouse import addressable
from resources.lakehouse.predicates import is_in

META = {"dagster_run_id": "test-run"}
SCHEMA = pa.schema(
    [
        pa.field("key", pa.int64()),
        pa.field("day", pa.date32()),
        pa.field("at", pa.timestamp("us", "UTC")),
        pa.field("name", pa.string()),
    ]
)


def entries(keys: np.ndarray) -> pa.Table:
    base = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    return pa.table(
        {
            "key": pa.array(keys, pa.int64()),
            "day": pa.array([dt.date(2024, 1, 1) + dt.timedelta(int(k) % 7) for k in keys]),
            "at": pa.array(
                [base + dt.timedelta(microseconds=int(k) % 10**12) for k in keys], SCHEMA[2].type
            ),
            "name": pa.array([f"n{k}" for k in keys]),
        },
        schema=SCHEMA,
    )


def expected(table: pa.Table, wanted: np.ndarray) -> list[dict]:
    rows = [r for r in table.to_pylist() if r["key"] in set(wanted.tolist())]
    return sorted(rows, key=lambda r: (r["key"], r["name"]))


def found(path: Path, wanted: np.ndarray) -> list[dict]:
    rows = addressable.rows_among(path, SCHEMA, "key", np.unique(wanted), SCHEMA.names)
    return sorted(rows.to_pylist(), key=lambda r: (r["key"], r["name"]))


@pytest.mark.parametrize("ordered", [True, False], ids=["sorted", "unsorted"])
def test_an_addressable_file_gives_the_rows_of_the_values_asked(tmp_path, spark, ordered):
    """Written by the lakehouse with `addressable` (delta-rs): every fixed-width chunk
    is read in place, and a key held twice, a key absent and keys at both ends of each
    row group are found or not as the file says."""
    rng = np.random.default_rng(7)
    keys = rng.integers(-(2**62), 2**62, 5_000)
    keys = np.concatenate([keys, keys[:10]])  # ten keys held twice
    table = entries(np.sort(keys) if ordered else keys)
    lake = Lakehouse(root=str(tmp_path), engine="delta-rs", spark=spark)
    lake.append("t", table, metadata=META, addressable=True)
    (path,) = DeltaTable(lake.uri("t")).file_uris()
    rows = pq.ParquetFile(path).metadata.row_group(0)
    with open(path, "rb") as handle:
        data = handle.read()
    for at, name in enumerate(SCHEMA.names[:3]):  # the fixed-width columns
        assert addressable._addressed(data, rows, at, SCHEMA.field(name).type) is not None
    wanted = np.concatenate([keys[:10], keys[-3:], rng.integers(-(2**62), 2**62, 20)])
    assert found(Path(path), wanted) == expected(table, wanted)


def test_any_other_parquet_file_gives_the_same_rows_read_whole(tmp_path):
    """Compressed, dictionary-encoded, several pages and row groups, nulls: nothing is
    addressed, and the rows are the same."""
    keys = np.arange(0, 30_000, 3, dtype=np.int64)
    table = entries(keys)
    table = table.set_column(
        2, "at", pa.array([None] * 5 + table["at"].to_pylist()[5:], SCHEMA[2].type)
    )
    path = tmp_path / "other.parquet"
    pq.write_table(table, path, row_group_size=4_000, data_page_size=1_024)
    rows = pq.ParquetFile(path).metadata.row_group(0)
    data = path.read_bytes()
    assert all(
        addressable._addressed(data, rows, at, SCHEMA.field(at).type) is None for at in range(3)
    )
    wanted = np.array([0, 3, 3_999, 4_002, 29_997, 1, 30_000])
    assert found(path, wanted) == expected(table, wanted)


def test_a_long_list_lookup_reads_the_same_rows_as_the_query(tmp_path, spark):
    """`read_arrow` with a long IN list on a table written addressable (several files)
    gives what a short one gives through DataFusion, key for key."""
    lake = Lakehouse(root=str(tmp_path), engine="delta-rs", spark=spark)
    for start in range(3):
        keys = np.arange(start, 9_000, 3, dtype=np.int64)
        lake.append("t", entries(keys), metadata=META, addressable=True)
    wanted = list(range(0, 9_000, 7))
    assert len(wanted) > 1_000  # the long list's reader
    by_list = lake.read_arrow("t", where=is_in("key", wanted), columns=["key", "at", "name"])
    by_query = [
        lake.read_arrow("t", where=is_in("key", wanted[i : i + 500]), columns=["key", "at", "name"])
        for i in range(0, len(wanted), 500)
    ]
    assert sorted(by_list.to_pylist(), key=lambda r: r["key"]) == sorted(
        (r for part in by_query for r in part.to_pylist()), key=lambda r: r["key"]
    )
    assert by_list.schema == pa.schema(
        [SCHEMA.field("key"), SCHEMA.field("at"), SCHEMA.field("name")]
    )
