"""The production instance: with DAGSTER_POSTGRES_URL set, `platform/instance.py` (which
`make setup`, `make dev` and `make demo` run) points run, event-log and schedule storage
at that Postgres database, and the platform's sensor ticks, backfills and restores work
against it. A real PostgreSQL server is started on 127.0.0.1 for the module."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
import servers
from support import day_of_visits, partition_range, platform_module, sensor_resources, visit

from assets.maintenance import restore_table
from assets.overwriting import visits_daily
from assets.overwriting.data_overwrite import VISITS_DAILY
from demo.servers import create_databases
from sensors import visits_late_files

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DAYS = [dt.date(2024, 6, 3) + dt.timedelta(days=i) for i in range(3)]

# Storage is the subject here; the engines' halves do the same Dagster work, and the
# delta-spark half runs in `make test-slow`.
pytestmark = pytest.mark.long_on_delta_spark


def instance_module():
    return platform_module("instance")


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    with servers.postgres_server() as url:
        yield url


@pytest.fixture
def postgres_instance(postgres_url, tmp_path, monkeypatch) -> Iterator[dg.DagsterInstance]:
    config = instance_module()
    # A database of its own per test: the module's server outlives each instance.
    database = f"dagster_{tmp_path.name.replace('-', '_').lower()}"
    create_databases(postgres_url, [database])
    url = postgres_url.rsplit("/", 1)[0] + f"/{database}"
    home = config.write_instance(tmp_path / "dagster", {config.POSTGRES_URL: url})
    monkeypatch.setenv(config.POSTGRES_URL, url)
    with dg.DagsterInstance.from_config(str(home.parent)) as instance:
        yield instance


def test_without_the_variable_the_instance_stays_on_sqlite(tmp_path):
    config = instance_module()
    home = config.write_instance(tmp_path, {})
    assert home.read_text() == (PROJECT_ROOT / "platform" / "dagster.yaml").read_text()
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert [
            type(storage).__name__
            for storage in (
                instance.run_storage,
                instance.event_log_storage,
                instance.schedule_storage,
            )
        ] == ["SqliteRunStorage", "SqliteEventLogStorage", "SqliteScheduleStorage"]


def test_a_tick_a_backfill_and_a_restore_against_postgres(
    postgres_instance, resources, landing, write_visits
):
    instance = postgres_instance
    assert [
        type(storage).__name__
        for storage in (instance.run_storage, instance.event_log_storage, instance.schedule_storage)
    ] == ["PostgresRunStorage", "PostgresEventLogStorage", "PostgresScheduleStorage"]
    # Postgres takes concurrent writers: the daemon ticks the sensors side by side.
    assert instance.get_settings("sensors")["use_threads"]
    for day in DAYS:
        write_visits(day, "part.jsonl", day_of_visits(day, 3))

    # The sensor's tick reads the instance's materializations: none yet, so it asks for
    # every landed day in one range run.
    with dg.build_sensor_context(instance=instance, resources=sensor_resources(landing)) as context:
        tick = visits_late_files(context)
    (request,) = [r for r in tick.run_requests if r.job_name == "visits_daily_job"]
    assert request.tags["dagster/asset_partition_range_start"] == DAYS[0].isoformat()
    assert request.tags["dagster/asset_partition_range_end"] == DAYS[-1].isoformat()

    # The backfill it asked for: one run over the range, a materialization per day.
    backfill = dg.materialize(
        [visits_daily],
        resources=resources,
        instance=instance,
        tags=partition_range(DAYS[0], DAYS[-1]),
    )
    assert backfill.success
    assert instance.get_materialized_partitions(visits_daily.key) == {d.isoformat() for d in DAYS}

    # A bad batch lands on the last day; the restore job undoes its materialization.
    lakehouse = resources["lakehouse"]
    before = lakehouse.count(VISITS_DAILY)
    write_visits(DAYS[-1], "bad.jsonl", [visit("bad", dt.datetime(2024, 6, 5, 9, tzinfo=dt.UTC))])
    dg.materialize(
        [visits_daily], partition_key=DAYS[-1].isoformat(), resources=resources, instance=instance
    )
    assert lakehouse.count(VISITS_DAILY) == before + 1
    restored = restore_table.execute_in_process(
        run_config={
            "ops": {
                next(iter(restore_table.graph.node_dict)): {
                    "config": {
                        "target": {
                            "undo_materialization": {
                                "asset_key": VISITS_DAILY,
                                "partition": DAYS[-1].isoformat(),
                            }
                        }
                    }
                }
            }
        },
        resources={"lakehouse": lakehouse},
        instance=instance,
    )
    assert restored.success
    assert lakehouse.count(VISITS_DAILY) == before
    runs = instance.get_runs()
    assert len(runs) == 3 and all(run.status == dg.DagsterRunStatus.SUCCESS for run in runs)
