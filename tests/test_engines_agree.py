"""The two Delta engines are interchangeable: the same inputs give tables with identical
content and the same commit metadata keys, and tables written by one engine are read and
written by the other (a user switching engines, a sensor reading with delta-rs what Spark
wrote)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path

import dagster as dg
import pyarrow as pa
from support import day_of_visits, partition_range

from assets.overwriting import visits_daily, visits_weekly
from assets.updates import device_catalog, devices
from resources import Lakehouse, LandingZone
from resources.lakehouse import WhenMatchedUpdate, WhenNotMatchedInsert
from resources.lakehouse.predicates import eq, matches

MONDAY = dt.date(2024, 3, 4)
ENGINES = ("delta-rs", "delta-spark")
TABLES = (
    "visits_daily",
    "visits_weekly/week=2024-03-04",
    "visits_manifest",
    "devices",
    "device_catalog",
    "device_catalog_versions",
)
# Columns that record when or by which run a row was written, not what it holds.
CLOCK_COLUMNS = {"changed_at", "recorded_at", "dagster_run_id"}


def checksum(lakehouse: Lakehouse, table: str) -> str:
    """A digest of the table's rows in a canonical order (columns by name, rows sorted)."""
    rows = lakehouse.read_arrow(table).to_pylist()
    canonical = sorted(
        json.dumps(
            {k: v for k, v in row.items() if k not in CLOCK_COLUMNS}, sort_keys=True, default=str
        )
        for row in rows
    )
    return hashlib.sha256("\n".join(canonical).encode()).hexdigest()[:16]


def land_inputs(landing: LandingZone) -> None:
    root = Path(landing.root)
    for i in range(3):
        day = MONDAY + dt.timedelta(days=i)
        folder = root / "visits" / f"date={day}"
        folder.mkdir(parents=True)
        body = "".join(json.dumps(v) + "\n" for v in day_of_visits(day, 40))
        (folder / "part-0.jsonl").write_text(body)
        (folder / "part-0.copy.jsonl").write_text(body)  # delivered twice
    cdc = root / "devices_cdc"
    cdc.mkdir()
    (cdc / "2024-03-04.csv").write_text("type;full_name;version\nphone;Pixel;8\nphone;Galaxy;24\n")
    (cdc / "2024-03-05.csv").write_text(
        "type;full_name;version;is_deleted\nphone;Pixel;8;true\ntablet;Tab;9;false\n"
    )
    catalog = root / "device_catalog"
    catalog.mkdir()
    for i, names in enumerate((["a", "b"], ["b", "c"])):
        lines = [json.dumps({"id": n, "full_name": f"{n}-{i}", "brand_name": "x"}) for n in names]
        (catalog / f"{MONDAY + dt.timedelta(days=i)}.jsonl").write_text("\n".join(lines) + "\n")


def run_everything(resources: dict) -> None:
    # The three visit days as one range run, as a backfill runs them.
    last = MONDAY + dt.timedelta(days=2)
    dg.materialize([visits_daily], tags=partition_range(MONDAY, last), resources=resources)
    dg.materialize([visits_weekly], partition_key=MONDAY.isoformat(), resources=resources)
    for i in range(2):
        day = (MONDAY + dt.timedelta(days=i)).isoformat()
        dg.materialize([devices], partition_key=day, resources=resources)
        dg.materialize([device_catalog], partition_key=day, resources=resources)
    # A backfill of both catalog days: a restore to empty, then each day merged again.
    for i in range(2):
        day = (MONDAY + dt.timedelta(days=i)).isoformat()
        dg.materialize([device_catalog], partition_key=day, resources=resources)


def test_both_engines_write_identical_tables_with_the_same_commit_metadata(
    tmp_path, spark, landing
):
    land_inputs(landing)
    lakes = {}
    for engine in ENGINES:
        lake = Lakehouse(root=str(tmp_path / engine), engine=engine, spark=spark)
        run_everything({"spark": spark, "lakehouse": lake, "landing": landing})
        lakes[engine] = lake
    rs, spark_lake = lakes["delta-rs"], lakes["delta-spark"]
    for table in TABLES:
        assert checksum(rs, table) == checksum(spark_lake, table), table
        assert rs.read_arrow(table).schema == spark_lake.read_arrow(table).schema, table
        keys = [sorted(h.metadata) for h in rs.history(table)]
        assert keys == [sorted(h.metadata) for h in spark_lake.history(table)], table
        assert rs.version(table) == spark_lake.version(table), table


def rows(lakehouse: Lakehouse) -> list[tuple]:
    return sorted((r["k"], r["v"]) for r in lakehouse.read_arrow("mixed").to_pylist())


def test_a_table_created_by_one_engine_is_read_and_written_by_the_other(tmp_path, spark):
    meta = {"dagster_run_id": "mixed", "partition_key": None}
    for first, second in (ENGINES, ENGINES[::-1]):
        root = str(tmp_path / f"{first}-then-{second}")
        one = Lakehouse(root=root, engine=first, spark=spark)
        other = Lakehouse(root=root, engine=second, spark=spark)
        batch = pa.table({"k": ["a", "b"], "v": pa.array([1, 2], pa.int64())})
        one.append(
            "mixed", batch, metadata=meta, table_properties={"delta.checkpointInterval": "2"}
        )
        assert rows(other) == [("a", 1), ("b", 2)]
        assert other.read("mixed").count() == 2
        other.overwrite(
            "mixed",
            pa.table({"k": ["b"], "v": pa.array([20], pa.int64())}),
            where=eq("k", "b"),
            metadata=meta,
        )
        other.merge(
            "mixed",
            pa.table({"k": ["c"], "v": pa.array([3], pa.int64())}),
            on=matches("k"),
            clauses=[WhenMatchedUpdate(), WhenNotMatchedInsert()],
            metadata=meta,
        )
        one.append("mixed", pa.table({"k": ["d"], "v": pa.array([4], pa.int64())}), metadata=meta)
        assert rows(other) == [("a", 1), ("b", 20), ("c", 3), ("d", 4)]
        other.restore("mixed", 2, metadata=meta)
        assert rows(one) == rows(other) == [("a", 1), ("b", 20), ("c", 3)]
        assert [h.version for h in one.history("mixed")] == [4, 3, 2, 1, 0]
        assert one.compact("mixed", metadata=meta).version == 5
        assert rows(other) == [("a", 1), ("b", 20), ("c", 3)]
