"""Transactional Writer: exactly-once partition writes, proven by replays, restores,
races and SIGKILLed writers."""

import datetime as dt
from concurrent.futures import ThreadPoolExecutor

import dagster as dg
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from exactly_once_writer import kill_trials
from support import DELTA_JARS, day_of_visits

from assets.maintenance import restore_table
from assets.overwriting import visits_daily
from assets.overwriting.data_overwrite import VISITS_DAILY
from assets.transactional_writer import (
    COMPACT_EVERY,
    INPUT_VERSION,
    INPUT_VERSIONS,
    INPUT_VERSIONS_SCHEMA,
    REWRITE_TAG,
    latest_input,
    register_input,
    register_inputs,
    transactional_metadata,
    write_exactly_once,
    write_partition_once,
)
from resources import Lakehouse
from resources.lakehouse.predicates import eq

DAY = dt.date(2024, 5, 6)
SCHEMA = pa.schema([pa.field("p", pa.string()), pa.field("n", pa.int64())])


def register(lakehouse, digest: str, *, force: bool = False) -> int:
    return register_input(
        lakehouse, asset_key="a", partition_key="p", digest=digest, run_id="r", force=force
    ).version


def test_an_input_keeps_its_number_until_it_changes(lakehouse):
    assert register(lakehouse, "A") == 1
    assert register(lakehouse, "A") == 1
    assert register(lakehouse, "B") == 2
    # An older content coming back is a new input: the table holds B's data now.
    assert register(lakehouse, "A") == 3
    assert register(lakehouse, "A", force=True) == 4
    assert latest_input(lakehouse, "a", "p").digest == "A"
    assert latest_input(lakehouse, "a", "other") is None


@pytest.mark.parametrize("engine", ["delta-rs"])  # the control table is in-process, either way
def test_a_range_registers_its_inputs_in_one_commit(lakehouse):
    days = [f"2024-01-{i:02d}" for i in range(1, 31)]
    first = register_inputs(lakehouse, asset_key="a", digests=dict.fromkeys(days, "d"), run_id="r")
    assert {entry.version for entry in first.values()} == {1}
    assert lakehouse.version(INPUT_VERSIONS) == 1  # 0 created it empty
    again = register_inputs(lakehouse, asset_key="a", digests=dict.fromkeys(days, "d"), run_id="r")
    assert again == first and lakehouse.version(INPUT_VERSIONS) == 1
    changed = register_inputs(
        lakehouse, asset_key="a", digests={**dict.fromkeys(days, "d"), days[3]: "e"}, run_id="r"
    )
    assert changed[days[3]].version == 2 and changed[days[4]].version == 1
    assert lakehouse.version(INPUT_VERSIONS) == 2


@pytest.mark.parametrize("engine", ["delta-rs"])
def test_writers_registering_at_once_never_get_the_same_number(lakehouse):
    """Four writers, each with its own connection, register inputs of one partition at
    once (and of one partition of their own): every input gets a number of its own."""

    def writer(name: str) -> list[int]:
        own = Lakehouse(root=lakehouse.root, engine="delta-rs", spark=lakehouse.spark)
        return [
            register_inputs(
                own,
                asset_key="a",
                digests={"shared": f"{name}-{i}", name: f"{name}-{i}"},
                run_id=name,
            )["shared"].version
            for i in range(5)
        ]

    with ThreadPoolExecutor(4) as pool:
        numbers = [n for got in pool.map(writer, ["w1", "w2", "w3", "w4"]) for n in got]
    assert sorted(numbers) == list(range(1, 21))
    assert latest_input(lakehouse, "a", "shared").version == 20
    assert all(latest_input(lakehouse, "a", w).version == 5 for w in ["w1", "w2", "w3", "w4"])


def write_rows(lakehouse, digest: str, rows: list[int], *, write_first=None):
    """A transactional overwrite of partition `p` of table `t`; `write_first` runs inside
    the write, before its commit (a concurrent run)."""

    def write(app_transaction, facts):
        if write_first:
            write_first()
        return lakehouse.overwrite(
            "t",
            pa.table({"p": ["p"] * len(rows), "n": rows}, schema=SCHEMA),
            where=eq("p", "p"),
            metadata={"digest": digest, **facts},
            app_transaction=app_transaction,
        )

    return write_exactly_once(
        lakehouse,
        table="t",
        asset_key="a",
        partition_key="p",
        digest=digest,
        run_id="r",
        write=write,
        create_empty=lambda: lakehouse.append("t", SCHEMA.empty_table(), metadata={}),
    )


def stored(lakehouse) -> list[int]:
    return sorted(lakehouse.read_arrow("t").column("n").to_pylist())


@pytest.mark.parametrize("engine", ["delta-rs"])  # compaction is the port's, either way
def test_the_control_table_stays_a_few_files_however_many_inputs_it_records(lakehouse):
    """A registration is a commit of one row; a long backfill would otherwise leave each
    registration reading one more file than the last."""
    partitions = [f"2024-01-{i:03d}" for i in range(2 * COMPACT_EVERY + 5)]
    for key in partitions:
        register_input(lakehouse, asset_key="a", partition_key=key, digest="d", run_id="r")
    assert len(DeltaTable(lakehouse.uri(INPUT_VERSIONS)).file_uris()) < COMPACT_EVERY // 2
    operations = [entry.operation for entry in lakehouse.history(INPUT_VERSIONS)]
    assert operations.count("OPTIMIZE") == 2
    assert [latest_input(lakehouse, "a", key).version for key in partitions] == [1] * len(
        partitions
    )
    assert register(lakehouse, "d") == 1 and register(lakehouse, "e") == 2


@pytest.mark.parametrize("engine", ["delta-rs"])  # the control table is written in process
def test_each_asset_registers_in_its_own_partition_compacted_on_its_own_count(lakehouse):
    """A busy asset's registrations neither make another asset's read more files nor
    rewrite them: the table is partitioned by asset, and each asset's partition is
    compacted after every COMPACT_EVERY of its own registrations."""
    register_input(lakehouse, asset_key="quiet", partition_key="p", digest="d", run_id="r")
    for i in range(COMPACT_EVERY):
        register_input(lakehouse, asset_key="busy", partition_key=f"{i}", digest="d", run_id="r")
    table = DeltaTable(lakehouse.uri(INPUT_VERSIONS))
    assert table.metadata().partition_columns == ["asset_key"]
    files = table.file_uris()
    assert sum("asset_key=busy" in f for f in files) == 1
    assert sum("asset_key=quiet" in f for f in files) == 1
    optimized = [e for e in lakehouse.history(INPUT_VERSIONS) if e.operation == "OPTIMIZE"]
    assert len(optimized) == 1
    assert latest_input(lakehouse, "quiet", "p").version == 1


@pytest.mark.long_on_delta_spark
def test_a_replayed_input_is_skipped_without_a_commit(lakehouse):
    first = write_rows(lakehouse, "A", [1, 2])
    assert first.result is not None and first.result.version == 1  # 0 created it empty
    assert lakehouse.history("t")[0].metadata[INPUT_VERSION] == 1

    replay = write_rows(lakehouse, "A", [1, 2])
    assert replay.result is None
    assert replay.skipped == "already committed at version 1"
    assert lakehouse.version("t") == 1

    changed = write_rows(lakehouse, "B", [3])
    assert changed.result is not None and changed.input.version == 2
    assert stored(lakehouse) == [3]


def test_a_write_overtaken_by_a_newer_input_commits_nothing(lakehouse):
    write_rows(lakehouse, "A", [1])
    # Run "B" registers its input (2) and, before it commits, run "C" registers (3) and
    # commits: B's older input must not overwrite C's.
    outcome = write_rows(lakehouse, "B", [2], write_first=lambda: write_rows(lakehouse, "C", [3]))
    assert outcome.result is None
    assert outcome.skipped.startswith("already committed at version 3: a newer input")
    assert stored(lakehouse) == [3]
    assert lakehouse.version("t") == 2


def materialize(resources, instance, **tags) -> dict:
    result = dg.materialize(
        [visits_daily],
        partition_key=DAY.isoformat(),
        resources=resources,
        instance=instance,
        tags=tags or None,
    )
    return result.asset_materializations_for_node("visits_daily")[0].metadata


@pytest.mark.long_on_delta_spark
def test_visits_daily_skips_a_committed_day_and_writes_it_again_after_a_restore(
    resources, lakehouse, instance, write_visits
):
    write_visits(DAY, "a.jsonl", day_of_visits(DAY, 3))
    assert materialize(resources, instance)["delta_version"].value == 1  # 0: created empty
    write_visits(DAY, "b.jsonl", day_of_visits(DAY, 2, prefix="late"))
    second = materialize(resources, instance)
    assert (second["delta_version"].value, second[INPUT_VERSION].value) == (2, 2)

    replay = materialize(resources, instance)
    assert replay["skipped"].value == "already committed at version 2"
    assert "delta_version" not in replay
    assert (replay["table_version"].value, replay["rows_inserted"].value) == (2, 0)
    assert lakehouse.version(VISITS_DAILY) == 2

    # The restore undoes the latest *commit* of the day (not the skipped run), and the
    # day's next run writes it again although its files did not change.
    restore_table.execute_in_process(
        run_config={
            "ops": {
                "restore_delta_table": {
                    "config": {
                        "target": {
                            "undo_materialization": {
                                "asset_key": "visits_daily",
                                "partition": DAY.isoformat(),
                            }
                        }
                    }
                }
            }
        },
        resources={"lakehouse": lakehouse},
        instance=instance,
    )
    assert lakehouse.count(VISITS_DAILY) == 3
    rewritten = materialize(resources, instance)
    assert rewritten[INPUT_VERSION].value == 4  # 3 is the restore's mark
    assert lakehouse.count(VISITS_DAILY) == 5

    forced = materialize(resources, instance, **{REWRITE_TAG: "true"})
    assert forced["delta_version"].value == lakehouse.version(VISITS_DAILY) == 5
    assert lakehouse.count(VISITS_DAILY) == 5


def versioned_asset(code_version: str) -> dg.AssetsDefinition:
    @dg.asset(
        name="versioned",
        partitions_def=dg.StaticPartitionsDefinition(["p"]),
        code_version=code_version,
    )
    def asset(context: dg.AssetExecutionContext, lakehouse: Lakehouse) -> dg.MaterializeResult:
        outcome = write_partition_once(
            context,
            lakehouse,
            partition_key="p",
            table="t",
            sources=[],
            write=lambda app_transaction, facts: lakehouse.overwrite(
                "t", pa.table({"n": [1]}), metadata=facts, app_transaction=app_transaction
            ),
            create_empty=lambda: lakehouse.append("t", pa.table({"n": [1]})[:0], metadata={}),
        )
        return dg.MaterializeResult(
            metadata=transactional_metadata(
                lakehouse, outcome, table="t", partition_key="p", sources=[]
            )
        )

    return asset


@pytest.mark.long_on_delta_spark
def test_a_new_code_version_is_a_new_input(lakehouse):
    def run(code_version: str) -> dict:
        result = dg.materialize(
            [versioned_asset(code_version)], partition_key="p", resources={"lakehouse": lakehouse}
        )
        return result.asset_materializations_for_node("versioned")[0].metadata

    assert run("1")["delta_version"].value == 1
    assert run("1")["skipped"].value == "already committed at version 1"
    assert run("2")["delta_version"].value == 2


# Fault trials: each boots a JVM (delta-spark) or a Python process in each of its writer
# processes, so they run in `make test-slow`: 100 trials on delta-rs, 20 on delta-spark.
SLOW_TRIALS = {"delta-rs": 100, "delta-spark": 20}


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_many_sigkilled_writers_leave_one_whole_copy(lakehouse, engine):
    trials = SLOW_TRIALS[engine]
    report = kill_trials(lakehouse, engine=engine, jars=DELTA_JARS, trials=trials, replay_every=10)
    # Random points hit both sides of the commit.
    assert report.killed_before_commit > 0 and report.killed_after_commit > 0
    print(f"{engine}: {report}")


@pytest.mark.parametrize("engine", ["delta-rs"])  # the control table is written in process
def test_a_control_table_made_before_it_was_partitioned_keeps_working(lakehouse):
    lakehouse.in_process().create(INPUT_VERSIONS, INPUT_VERSIONS_SCHEMA, metadata={})
    for i in range(COMPACT_EVERY):
        register_input(lakehouse, asset_key="a", partition_key=f"{i}", digest="d", run_id="r")
    assert DeltaTable(lakehouse.uri(INPUT_VERSIONS)).metadata().partition_columns == []
    assert len(DeltaTable(lakehouse.uri(INPUT_VERSIONS)).file_uris()) == 1
    assert (
        register_input(lakehouse, asset_key="a", partition_key="0", digest="e", run_id="r").version
        == 2
    )
