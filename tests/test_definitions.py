"""The whole Definitions object, as `dagster dev` and `dagster definitions validate` load it."""

from __future__ import annotations

import importlib
import os
import platform
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from support import instance_home, platform_module

from assets import external
from assets.catalog import RESTORE_SLICE, declared, with_catalog_policy

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def load_definitions_module():
    return platform_module("definitions")


def test_platform_folder_never_shadows_the_stdlib_module():
    assert not (PROJECT_ROOT / "platform" / "__init__.py").exists()
    assert callable(platform.system)
    assert Path(platform.__file__).parent != PROJECT_ROOT / "platform"


def test_the_graph_has_every_asset_check_job_and_sensor(tmp_path):
    module = load_definitions_module()
    defs = module.build_definitions({"LAKEHOUSE_ROOT": str(tmp_path / "l")})
    graph = defs.resolve_asset_graph()
    assert {k.to_user_string() for k in graph.materializable_asset_keys} == {
        "visits_daily",
        "visits_weekly",
        "devices",
        "device_catalog",
        "payments",
        "user_sessions",
        "device_snapshot",
        "telemetry_raw",
        "telemetry_running_totals",
        "telemetry_hourly",
        "user_events_staging",
        "user_events",
        "shredded_events",
        "warehouse_events",
    }
    # A backfill of days (or weeks) is one run: one Spark session, one pass where the
    # asset's semantics allow it.
    for timed in graph.materializable_asset_keys:
        node = graph.get(timed)
        if isinstance(node.partitions_def, dg.TimeWindowPartitionsDefinition):
            assert node.backfill_policy == dg.BackfillPolicy.single_run(), timed
    for stage in ("shredded_events", "warehouse_events"):
        node = graph.get(dg.AssetKey(stage))
        assert node.partitions_def.name == "enriched_runs"
        assert node.backfill_policy == dg.BackfillPolicy.single_run()
    # Every Delta table the platform writes is in the catalog: control tables as
    # external assets downstream of their writers, the landing zone's folders upstream.
    assert {k.to_user_string() for k in graph.external_asset_keys} == {
        *(f"landing/{folder}" for folder in external.LANDING),
        *(f"control/{table}" for table in external.CONTROL),
        f"control/{external.SENSOR_STATE}",
    }
    assert graph.get(dg.AssetKey("warehouse_events")).parent_keys == {
        dg.AssetKey("shredded_events")
    }
    raw = graph.get(dg.AssetKey("telemetry_raw"))
    assert isinstance(raw.partitions_def, dg.DynamicPartitionsDefinition)
    assert raw.partitions_def.name == "subjects"
    totals = dg.AssetKey("telemetry_running_totals")
    assert graph.get(totals).parent_keys == {dg.AssetKey("telemetry_raw")}
    hourly = graph.get(dg.AssetKey("telemetry_hourly"))
    assert hourly.parent_keys == {dg.AssetKey("telemetry_raw"), totals}
    # The Stateful Merger depends on its own previous day, so backfills run in order.
    catalog = graph.get(dg.AssetKey("device_catalog"))
    assert dg.AssetKey("device_catalog") in catalog.parent_keys
    weekly = graph.get(dg.AssetKey("visits_weekly")).partitions_def
    assert weekly.get_first_partition_key() == "2024-01-01"
    assert weekly.get_next_partition_key("2024-12-30") == "2025-01-06"
    snapshot = graph.get(dg.AssetKey("device_snapshot"))
    assert snapshot.parent_keys == {dg.AssetKey("device_catalog")}
    assert snapshot.partitions_def is None
    daily = graph.get(dg.AssetKey("visits_daily")).partitions_def
    assert daily.get_first_partition_key() == "2024-01-01"
    assert {c.name for c in graph.asset_check_keys} == {
        "table_count_below_limit",
        "no_failed_files",
        "no_quarantined_files",
        "no_idempotency_conflicts",
        "staged_keys_unique_and_non_null",
        "staged_event_times_within_bounds",
        "staged_row_count_matches_batch",
    }
    # The audits that must hold before data is published block: the staged events' (what
    # user_events publishes) and the payments' (a day that fails is not committed). The
    # others warn: the data they look at is published whatever they say.
    assert {c.name for c in graph.asset_check_keys if graph.get_check_spec(c).blocking} == {
        "no_idempotency_conflicts",
        "staged_keys_unique_and_non_null",
        "staged_event_times_within_bounds",
        "staged_row_count_matches_batch",
    }
    jobs = {job.name for job in defs.resolve_all_job_defs()}
    assert {
        "visits_daily_job",
        "freeze_visits_weeks",
        "restore_table",
        "vacuum_table",
        "compact_tables",
        "point_device_snapshot",
        "telemetry_job",
        "blacklist_telemetry_file",
        "reingest_telemetry_file",
        "release_quarantined_file",
        "event_batch_job",
        "enriched_run_job",
        "skip_enriched_run",
    } <= jobs
    # A refusal of bad input or of a configuration is not retried by the instance; a dead
    # run process is.
    for name in (
        "enriched_run_job",
        "event_batch_job",
        "skip_enriched_run",
        "restore_table",
        "vacuum_table",
        "compact_tables",
        "freeze_visits_weeks",
        "point_device_snapshot",
        "blacklist_telemetry_file",
        "reingest_telemetry_file",
        "release_quarantined_file",
    ):
        assert defs.resolve_job_def(name).tags["dagster/retry_on_asset_or_op_failure"] == "false"
    assert all(s.description for s in defs.sensors)
    assert [s.name for s in defs.sensors] == [
        "visits_late_files",
        "telemetry_files",
        "change_files",
        "event_batch_files",
        "enriched_run_directories",
        "stuck_enriched_runs",
        "dead_runs",
        "lakehouse_automation",
    ]
    assert [s.name for s in defs.schedules] == ["compact_telemetry_tables"]
    resources = defs.resources
    assert resources["lakehouse"].root == str(tmp_path / "l")
    assert resources["landing"].root == str(PROJECT_ROOT / ".data" / "landing")
    assert resources["lakehouse"].engine == "delta-rs"


def test_every_asset_and_check_says_what_it_is_who_owns_it_and_how_to_restore_it(tmp_path):
    defs = load_definitions_module().build_definitions({"LAKEHOUSE_ROOT": str(tmp_path / "l")})
    graph = defs.resolve_asset_graph()
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        assert node.owners == ["team:data-platform"], key
        assert node.tags["pattern"] and node.description, key
        if not node.is_materializable:
            continue
        assert "Restore: " in node.description and "Pattern: " in node.description, key
        [reference] = node.metadata["dagster/code_references"].code_references
        assert Path(reference.file_path).is_file() and reference.line_number, key
    # The landing zone and the control tables are in the lineage.
    assert dg.AssetKey(["landing", "visits"]) in graph.get(dg.AssetKey("visits_daily")).parent_keys
    # visits_weekly is built from visits_daily's days, not from the files.
    assert graph.get(dg.AssetKey("visits_weekly")).parent_keys == {dg.AssetKey("visits_daily")}
    assert (
        dg.AssetKey(["control", "visits_manifest"])
        in graph.get(dg.AssetKey("visits_weekly")).child_keys
    )
    for check_key in graph.asset_check_keys:
        assert graph.get_check_spec(check_key).description, check_key


def test_an_asset_declares_its_pattern_restore_and_tables_in_its_own_module():
    @dg.asset(**declared("data-overwrite", restore=RESTORE_SLICE, reads=["visits"]))
    def new_daily_asset() -> None: ...

    @dg.asset
    def undeclared() -> None: ...

    [spec] = with_catalog_policy([new_daily_asset])[0].specs
    assert spec.tags["pattern"] == "data-overwrite" and spec.owners == ["team:data-platform"]
    assert "partition: <key>}` moves that partition alone" in spec.metadata["restore"]
    assert "Restore: restore_table with `undo_materialization: {asset_key: new_daily_asset" in (
        spec.description
    )
    assert [dep.asset_key for dep in spec.deps] == [dg.AssetKey(["landing", "visits"])]
    with pytest.raises(ValueError, match="asset undeclared declares no pattern"):
        with_catalog_policy([undeclared])
    with pytest.raises(ValueError, match="no landing folder vistis"):
        declared("data-overwrite", restore=RESTORE_SLICE, reads=["vistis"])
    with pytest.raises(ValueError, match=r"no control table input_version \(see"):
        declared("data-overwrite", restore=RESTORE_SLICE, writes=["input_version"])
    # A control table that no asset declares it writes fails the definitions' load.
    others = [table for table in external.CONTROL if table != "visit_first_seen"]

    @dg.asset(**declared("data-overwrite", restore=RESTORE_SLICE, writes=others))
    def writes_all_but_one() -> None: ...

    with pytest.raises(ValueError, match="no asset declares it writes visit_first_seen: name"):
        external.external_specs([writes_all_but_one])


def test_every_asset_says_in_its_own_module_how_it_is_built(tmp_path):
    """A job declared beside the asset selects it (what a sensor or a person launches),
    or its automation condition builds it: adding an asset touches its own module."""
    defs = load_definitions_module().build_definitions({"LAKEHOUSE_ROOT": str(tmp_path / "l")})
    graph = defs.resolve_asset_graph()
    for key in graph.materializable_asset_keys:
        node = graph.get(key)
        if node.automation_condition is not None:
            continue
        [reference] = node.metadata["dagster/code_references"].code_references
        path = Path(reference.file_path).relative_to(PROJECT_ROOT).with_suffix("")
        module = importlib.import_module(".".join(path.parts))
        jobs = [
            value.name
            for value in vars(module).values()
            if isinstance(getattr(value, "selection", None), dg.AssetSelection)
            and key in value.selection.resolve(graph)
        ]
        assert jobs, f"{key.to_user_string()}: no job in {module.__name__} selects it"


def undescribed_fields(config_type, path: str) -> list[str]:
    """The config fields under `config_type` (shapes and selectors, nested) that have no
    description."""
    missing = []
    for name, field in getattr(config_type, "fields", {}).items():
        if not field.description and field.config_type.kind.name not in ("SELECTOR",):
            missing.append(f"{path}.{name}")
        missing += undescribed_fields(field.config_type, f"{path}.{name}")
    return missing


def test_every_config_field_a_user_fills_in_says_what_it_is(tmp_path):
    """The launchpad shows each field's description: the operator jobs' and the assets'."""
    defs = load_definitions_module().build_definitions({"LAKEHOUSE_ROOT": str(tmp_path / "l")})
    missing = []
    for job in defs.resolve_all_job_defs():
        for node in job.graph.node_dict.values():
            schema = node.definition.config_schema
            if schema is not None:
                missing += undescribed_fields(schema.as_field().config_type, node.name)
    assert missing == []


def test_the_instance_allows_one_run_per_telemetry_subject(tmp_path, monkeypatch):
    instance_home(tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    with dg.DagsterInstance.get() as instance:
        limits = instance.get_concurrency_config().run_queue_config.tag_concurrency_limits
    assert {
        "key": "telemetry/subject",
        "value": {"applyLimitPerUniqueValue": True},
        "limit": 1,
    } in limits


def test_the_instance_re_executes_failed_runs(tmp_path, monkeypatch):
    instance_home(tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    with dg.DagsterInstance.get() as instance:
        assert instance.run_retries_enabled
        assert instance.run_retries_max_retries == 2
        assert instance.run_retries_retry_on_asset_or_op_failure


def test_launchpad_runs_of_the_telemetry_job_carry_the_subject_tag():
    from assets.telemetry import SUBJECT_TAG, telemetry_job

    module = load_definitions_module()
    job = module.build_definitions({}).resolve_job_def(telemetry_job.name)
    config = job.partitioned_config
    assert config.get_tags_for_partition_key("Tool 'x'")[SUBJECT_TAG] == "Tool 'x'"


def test_the_file_sensors_tick_as_often_as_the_deployment_says():
    """30 s by default (the automation sensor too); the demo's code location ticks every
    5 s. A sensor with an
    interval of its own keeps it, and a sensor is the same sensor at any interval."""
    module = load_definitions_module()
    default = {s.name: s for s in module.build_definitions({}).sensors}
    fast = {s.name: s for s in module.build_definitions({"SENSOR_INTERVAL_SECONDS": "5"}).sensors}
    assert {name: s.minimum_interval_seconds for name, s in fast.items()} == {
        "visits_late_files": 5,
        "telemetry_files": 5,
        "change_files": 5,
        "event_batch_files": 5,
        "enriched_run_directories": 5,
        "stuck_enriched_runs": 300,
        "dead_runs": 10,
        "lakehouse_automation": 5,
    }
    assert {s.minimum_interval_seconds for s in default.values()} == {30, 300, 10}
    for name, sensor in fast.items():
        assert (sensor.description, sensor.default_status) == (
            default[name].description,
            default[name].default_status,
        )
        if name not in ("dead_runs", "lakehouse_automation"):  # they target no job
            assert [job.name for job in sensor.jobs] == [j.name for j in default[name].jobs]
        assert sensor.required_resource_keys == default[name].required_resource_keys
    with pytest.raises(ValueError, match="whole number of seconds"):
        module.build_definitions({"SENSOR_INTERVAL_SECONDS": "0"})


def test_the_run_queue_is_looked_at_every_second(tmp_path, monkeypatch):
    """A run a sensor asked for starts within a second, not Dagster's default five."""
    instance_home(tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    with dg.DagsterInstance.get() as instance:
        assert instance.run_coordinator.dequeue_interval_seconds == 1


def test_an_unknown_engine_is_refused():
    module = load_definitions_module()
    with pytest.raises(ValueError, match="LAKEHOUSE_ENGINE"):
        module.build_definitions({"LAKEHOUSE_ENGINE": "parquet"})


def test_dagster_loads_the_workspace_like_dagster_dev(tmp_path):
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path), "LAKEHOUSE_ROOT": str(tmp_path / "l")}
    instance_home(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "dagster", "definitions", "validate", "-w", "workspace.yaml"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Validation successful for code location lakehouse" in result.stderr + result.stdout


@pytest.mark.parametrize(
    "module",
    [
        "assets.overwriting",
        "assets.updates",
        "assets.database",
        "assets.immutable",
        "assets.telemetry",
        "assets.maintenance",
        "demo.__main__",
    ],
)
def test_each_package_imports_on_its_own(module):
    """Whatever a tool imports first (the demo imports `assets.overwriting`), no import
    cycle between the pattern families breaks it."""
    subprocess.run([sys.executable, "-c", f"import {module}"], cwd=PROJECT_ROOT, check=True)


def test_an_object_store_root_takes_dagster_deltalake_settings_and_a_local_one_never_loads_it():
    """The S3 settings are dagster-deltalake's own classes; importing the package loads
    pandas (through pyarrow.dataset), so definitions with a local root never import it."""
    script = """
import sys
sys.path.insert(0, "tests")
from support import platform_module
module = platform_module("definitions")
module.build_definitions({"LAKEHOUSE_ROOT": "/tmp/l"})
assert "dagster_deltalake" not in sys.modules, "a local root imported dagster_deltalake"
resources = module.build_resources({
    "LAKEHOUSE_ROOT": "s3://bucket/lakehouse",
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
    "AWS_ALLOW_HTTP": "true",
})
from dagster_deltalake.config import S3Config
from resources.object_store import S3Lakehouse, S3Spark
lakehouse, spark = resources["lakehouse"], resources["spark"]
assert isinstance(lakehouse, S3Lakehouse) and isinstance(spark, S3Spark)
assert isinstance(lakehouse.s3.s3, S3Config) and spark.s3 == lakehouse.s3
assert lakehouse.s3.client.allow_http
from resources.s3_landing import S3LandingZone
assert not isinstance(resources["landing"], S3LandingZone)
# Files landing in a bucket, tables on a disk: Spark reaches the bucket all the same.
resources = module.build_resources({
    "LAKEHOUSE_ROOT": "/tmp/l",
    "LANDING_ROOT": "s3://landing/in",
    "LANDING_QUEUE_URL": "http://127.0.0.1:9000/123/landing-events",
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
})
landing, spark = resources["landing"], resources["spark"]
assert isinstance(landing, S3LandingZone) and landing.root == "s3://landing/in"
assert landing.queue_url == "http://127.0.0.1:9000/123/landing-events"
assert isinstance(spark, S3Spark) and spark.s3 == landing.s3
"""
    subprocess.run([sys.executable, "-c", script], cwd=PROJECT_ROOT, check=True)
