"""device_catalog: the Stateful Merger restores the right version before every backfill."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import subprocess
from pathlib import Path

import dagster as dg
import pytest
from support import partition_range

from assets.updates import device_catalog
from assets.updates.stateful_merger import (
    DEVICE_CATALOG,
    VERSIONS,
    DayPlan,
    plan_day,
    recorded_version,
)
from resources import Lakehouse
from resources.lakehouse import HistoryEntry

DAYS = [dt.date(2024, 7, d) for d in (1, 2, 3, 4)]
FILES = {
    DAYS[0]: [("a", "Apple", "iPhone 15", "A16"), ("b", "Google", "Pixel 8", "Tensor G3")],
    DAYS[1]: [("a", "Apple", "iPhone 15 Pro", "A17"), ("c", "Samsung", "S24", "Exynos")],
    DAYS[2]: [("a", "Apple", "iPhone 15 Pro Max", "A17 Pro"), ("c", "Samsung", "S24+", "")],
    DAYS[3]: [("d", "Nokia", "3310", "none")],
}


def entry(version: int, operation: str, **metadata) -> HistoryEntry:
    return HistoryEntry(version, dt.datetime.now(dt.UTC), operation, {}, {}, metadata)


class TestPlanDay:
    """The decision alone, one failure each."""

    def test_first_day_starts_empty(self):
        assert plan_day("2024-07-01", "empty", []).action == "start_empty"

    def test_nothing_since_the_previous_day_merges_directly(self):
        assert plan_day("2024-07-02", "5", []) == DayPlan("merge", "5")

    def test_compaction_alone_does_not_count_as_moving_past(self):
        # Guards: a compaction between runs triggering a needless restore.
        assert plan_day("2024-07-02", "5", [entry(6, "OPTIMIZE")]).action == "merge"

    def test_backfill_restores_to_the_last_version_with_the_previous_days_rows(self):
        # Guards: restoring to D-1's version drops the compaction committed after it.
        commits = [entry(6, "OPTIMIZE"), entry(7, "MERGE", partition_key="2024-07-03", base="6")]
        assert plan_day("2024-07-02", "5", commits) == DayPlan("restore", "5", 6)

    def test_a_retry_after_the_merge_committed_records_it_instead_of_merging_again(self):
        # Guards: a failure between MERGE and the versions update merging twice.
        commits = [
            entry(6, "MERGE", partition_key="2024-07-02", base="5", step="merge"),
            entry(7, "OPTIMIZE"),
        ]
        assert plan_day("2024-07-02", "5", commits) == DayPlan("already_merged", "5", 6)

    def test_a_merge_of_the_same_day_onto_another_state_is_not_reused(self):
        commits = [entry(6, "MERGE", partition_key="2024-07-02", base="4", step="merge")]
        assert plan_day("2024-07-02", "5", commits).action == "restore"

    def test_a_retry_after_the_restore_committed_merges_without_restoring_again(self):
        commits = [
            entry(6, "MERGE", partition_key="2024-07-03"),
            entry(7, "RESTORE", partition_key="2024-07-02", base="5", step="reset"),
        ]
        assert plan_day("2024-07-02", "5", commits) == DayPlan("merge", "5")


@pytest.fixture
def write_catalog(landing):
    def write(day: dt.date, rows) -> Path:
        path = Path(landing.root) / "device_catalog" / f"{day.isoformat()}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        keys = ("id", "brand_name", "full_name", "processor_brand")
        path.write_text("".join(json.dumps(dict(zip(keys, r, strict=True))) + "\n" for r in rows))
        return path

    return write


@contextlib.contextmanager
def refused_writes(folder: Path):
    """A real storage failure: nothing can be created in `folder` (chattr +i)."""
    made = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"needs `chattr +i` (root, ext4) to make storage refuse writes: {made.stderr}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


def run(resources, day: dt.date, **kwargs) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [device_catalog], partition_key=day.isoformat(), resources=resources, **kwargs
    )


def catalog(lakehouse: Lakehouse, version: int | None = None) -> list[tuple]:
    rows = lakehouse.read_arrow(DEVICE_CATALOG, version=version).to_pylist()
    return sorted((r["id"], r["full_name"], r["processor_brand"]) for r in rows)


def metadata_of(result) -> dict:
    return result.asset_materializations_for_node("device_catalog")[0].metadata


def clean_run(tmp_path, spark, landing, files) -> dict[dt.date, list[tuple]]:
    """Every day once, in order, on a fresh table: the reference states."""
    lakehouse = Lakehouse(root=str(tmp_path / "clean"), spark=spark)
    resources = {"spark": spark, "lakehouse": lakehouse, "landing": landing}
    states = {}
    for day in sorted(files):
        run(resources, day)
        states[day] = catalog(lakehouse)
    return states


def assert_versions_consistent(lakehouse, states):
    """Each recorded version holds exactly that day's clean state."""
    for day, state in states.items():
        version = recorded_version(lakehouse, day)
        assert catalog(lakehouse, version) == state, day


def merge_every_day_then_correct_day_two(resources, write_catalog) -> list[tuple]:
    """Every day merged in order; then day 2's file is corrected after day 3 already
    changed the same rows. Returns the corrected rows."""
    for day, rows in FILES.items():
        write_catalog(day, rows)
    for day in DAYS:
        run(resources, day)
    corrected = [("a", "Apple", "iPhone 15 Pro (fixed)", "A17"), ("c", "Samsung", "S24", "Exynos")]
    write_catalog(DAYS[1], corrected)
    return corrected


@pytest.mark.long_on_delta_spark
def test_backfilling_a_middle_day_equals_a_clean_run(
    tmp_path, spark, resources, lakehouse, landing, write_catalog
):
    corrected = merge_every_day_then_correct_day_two(resources, write_catalog)

    backfill = run(resources, DAYS[1])
    assert metadata_of(backfill)["plan"].value == "restore"
    # Right after the backfilled day, the table is exactly the clean state after it.
    reference = clean_run(tmp_path, spark, landing, {**FILES, DAYS[1]: corrected})
    assert catalog(lakehouse) == reference[DAYS[1]]
    for day in DAYS[2:]:
        result = run(resources, day)
        assert metadata_of(result)["plan"].value == "merge"
        assert metadata_of(result)["delta_version"].value == recorded_version(lakehouse, day)
    assert catalog(lakehouse) == reference[DAYS[-1]]
    assert_versions_consistent(lakehouse, reference)


@pytest.mark.long_on_delta_spark
def test_a_backfilled_range_is_one_run_that_restores_once_and_equals_a_clean_run(
    tmp_path, spark, resources, lakehouse, landing, write_catalog
):
    corrected = merge_every_day_then_correct_day_two(resources, write_catalog)

    backfill = dg.materialize(
        [device_catalog], resources=resources, tags=partition_range(DAYS[1], DAYS[-1])
    )
    events = backfill.asset_materializations_for_node("device_catalog")
    assert [e.partition for e in events] == [day.isoformat() for day in DAYS[1:]]
    assert [e.metadata["plan"].value for e in events] == ["restore", "merge", "merge"]
    assert sum(h.operation == "RESTORE" for h in lakehouse.history(DEVICE_CATALOG)) == 1
    reference = clean_run(tmp_path, spark, landing, {**FILES, DAYS[1]: corrected})
    assert catalog(lakehouse) == reference[DAYS[-1]]
    assert_versions_consistent(lakehouse, reference)


# How a range reports a failed partition is Dagster's part, the same on either engine.
@pytest.mark.parametrize("engine", ["delta-rs"])
def test_a_range_stops_at_its_first_bad_day(resources, lakehouse, landing, write_catalog):
    for day, rows in FILES.items():
        write_catalog(day, rows)
    (Path(landing.root) / "device_catalog" / f"{DAYS[1]}.jsonl").write_text("{oops\n")
    result = dg.materialize(
        [device_catalog],
        resources=resources,
        tags=partition_range(DAYS[0], DAYS[-1]),
        raise_on_error=False,
    )
    error = result.get_step_failure_events()[0].event_specific_data.error.to_string()
    assert "1 of 4 partitions failed (2024-07-02); 1 committed, 2 not run" in error
    # Later days build on the bad one: none was merged.
    assert recorded_version(lakehouse, DAYS[0]) is not None
    assert [recorded_version(lakehouse, day) for day in DAYS[1:]] == [None, None, None]


@pytest.mark.long_on_delta_spark
def test_compaction_and_an_empty_day_do_not_shift_the_day_to_version_link(
    tmp_path, spark, resources, lakehouse, landing, write_catalog
):
    files = {**FILES, DAYS[1]: []}  # day 2's file is empty
    for day, rows in files.items():
        write_catalog(day, rows)
    run(resources, DAYS[0])
    lakehouse.compact(DEVICE_CATALOG, metadata={"operation": "maintenance"})
    first_version = recorded_version(lakehouse, DAYS[0])
    assert metadata_of(run(resources, DAYS[1]))["plan"].value == "merge"
    for day in DAYS[2:]:
        run(resources, day)
    reference = clean_run(tmp_path, spark, landing, files)
    assert_versions_consistent(lakehouse, reference)
    assert recorded_version(lakehouse, DAYS[1]) >= first_version

    # Compaction after day 2, then a backfill of day 3: the restore keeps the compaction.
    lakehouse.compact(DEVICE_CATALOG, metadata={"operation": "maintenance"})
    run(resources, DAYS[2])
    restore = next(h for h in lakehouse.history(DEVICE_CATALOG) if h.operation == "RESTORE")
    assert restore.metadata["partition_key"] == DAYS[2].isoformat()
    assert catalog(lakehouse) == reference[DAYS[2]]


@pytest.mark.long_on_delta_spark
def test_a_failure_after_the_merge_does_not_merge_twice_on_retry(
    tmp_path, spark, resources, lakehouse, landing, write_catalog
):
    for day, rows in FILES.items():
        write_catalog(day, rows)
    run(resources, DAYS[0])
    # Storage refuses the versions table's next commit (its log folder made immutable),
    # after the catalog's MERGE has committed.
    with refused_writes(Path(lakehouse.uri(VERSIONS)) / "_delta_log"):
        failed = run(resources, DAYS[1], raise_on_error=False)
    assert not failed.success
    merges = [h for h in lakehouse.history(DEVICE_CATALOG) if h.operation == "MERGE"]
    assert merges[0].metadata["partition_key"] == DAYS[1].isoformat()

    retry = run(resources, DAYS[1])
    assert metadata_of(retry)["plan"].value == "already_merged"
    assert [h for h in lakehouse.history(DEVICE_CATALOG) if h.operation == "MERGE"] == merges
    assert recorded_version(lakehouse, DAYS[1]) == merges[0].version
    reference = clean_run(tmp_path, spark, landing, {d: FILES[d] for d in DAYS[:2]})
    assert_versions_consistent(lakehouse, reference)


@pytest.mark.long_on_delta_spark
def test_a_vacuumed_restore_target_stops_the_backfill_and_changes_nothing(
    resources, lakehouse, write_catalog
):
    for day, rows in FILES.items():
        write_catalog(day, rows)
    for day in DAYS[:3]:
        run(resources, day)
    lakehouse.vacuum(DEVICE_CATALOG, retention_hours=0)
    before, version = catalog(lakehouse), lakehouse.version(DEVICE_CATALOG)
    failed = run(resources, DAYS[1], raise_on_error=False)
    assert not failed.success
    error = failed.get_step_failure_events()[0].event_specific_data.error.to_string()
    assert "device_catalog" in error and "VACUUM" in error and "retention 0 h" in error
    assert (catalog(lakehouse), lakehouse.version(DEVICE_CATALOG)) == (before, version)


def test_bad_catalog_lines_name_file_and_line(resources, lakehouse, landing, write_catalog):
    path = write_catalog(DAYS[0], FILES[DAYS[0]])
    path.write_text(
        path.read_text()
        + '{"id": "x", "brand_name": "B"}\n{oops\n'
        + '{"id": "y", "full_name": "F", "brand_name": {"a": 1}}\n'
        + '{"id": 7, "full_name": "F"}\n'
    )
    failed = run(resources, DAYS[0], raise_on_error=False)
    error = failed.get_step_failure_events()[0].event_specific_data.error.to_string()
    assert "device_catalog/2024-07-01.jsonl:3: missing required field 'full_name'" in error
    assert "device_catalog/2024-07-01.jsonl:4: malformed JSON" in error
    # Wrong types are refused, never stored as their JSON text.
    assert "device_catalog/2024-07-01.jsonl:5: field 'brand_name' is OBJECT, not text" in error
    assert "device_catalog/2024-07-01.jsonl:6: field 'id' is BIGINT, not text" in error
    assert not lakehouse.exists(DEVICE_CATALOG)


@pytest.mark.long_on_delta_spark
def test_a_byte_order_mark_is_tolerated(resources, lakehouse, write_catalog):
    path = write_catalog(DAYS[0], FILES[DAYS[0]])
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes().replace(b"\n", b"\r\n"))
    run(resources, DAYS[0])
    assert catalog(lakehouse) == [("a", "iPhone 15", "A16"), ("b", "Pixel 8", "Tensor G3")]
