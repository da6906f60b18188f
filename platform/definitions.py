"""The one Definitions object: every asset, check, job, sensor and resource is wired here.

Loaded by `dagster dev` (workspace.yaml) and `dagster definitions validate` as a file:
`platform/` is deliberately not a package, because `platform` is a stdlib module name.
Configuration comes from the environment when Dagster loads the code (never at import):
LAKEHOUSE_ROOT, LANDING_ROOT (LANDING_QUEUE_URL), SPARK_MASTER, SPARK_REMOTE (with
SPARK_SERVER_STATE when `make dev` started it), SPARK_MASTER_UI, LAKEHOUSE_ENGINE,
DELTA_SPARK_JARS, SENSOR_INTERVAL_SECONDS, TELEMETRY_COMPUTE, and for an `s3://` root the
AWS_* variables of its endpoint and credentials (read through dg.EnvVar, so secrets never
land in the run's config).
"""

from __future__ import annotations

import atexit
import functools
import gc
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import dagster as dg

import assets
from assets import database, telemetry, warehouse
from assets.catalog import with_catalog_policy
from assets.external import external_specs
from resources import Lakehouse, LandingZone, SparkResource
from resources.object_uri import is_object_store
from sensors import sensors
from sensors.automation import automation_sensor
from sensors.cadence import DEFAULT_INTERVAL_SECONDS, every

PROJECT_ROOT = Path(__file__).resolve().parent.parent

# Every process that loads these definitions (each run, the code server) skips Python's
# last full garbage collection at exit: it walks every object of dagster, pyspark and
# pandas only to free memory that the exit frees anyway, 0.4 to 0.7 s of each run's wall
# time (see benchmarks/run_cost.py). Frozen objects are left to the exit; handlers
# registered later (Spark Connect's, gRPC's) still run before this one.
atexit.register(gc.freeze)


def _location(value: str) -> str:
    """Object-store URIs pass through; local paths become absolute (relative to the
    project), so runs launched from any working directory agree on where data lives."""
    if "://" in value:
        return value
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else (PROJECT_ROOT / path).resolve())


def _compute(env: Mapping[str, str]) -> Literal["auto", "embedded", "spark"]:
    compute = env.get("TELEMETRY_COMPUTE", "auto")
    if compute not in ("auto", "embedded", "spark"):
        raise ValueError(
            f"TELEMETRY_COMPUTE must be 'auto', 'embedded' or 'spark', not {compute!r}"
        )
    return compute


def build_resources(env: Mapping[str, str]) -> dict[str, dg.ConfigurableResource]:
    engine = env.get("LAKEHOUSE_ENGINE", "delta-rs")
    if engine not in ("delta-rs", "delta-spark"):
        raise ValueError(f"LAKEHOUSE_ENGINE must be 'delta-rs' or 'delta-spark', not {engine!r}")
    root = _location(env.get("LAKEHOUSE_ROOT", ".data/lakehouse"))
    spark_settings: dict[str, Any] = dict(
        master=env.get("SPARK_MASTER", "local[*]"),
        remote=env.get("SPARK_REMOTE", ""),
        server_state=env.get("SPARK_SERVER_STATE", ""),
        master_ui=env.get("SPARK_MASTER_UI", ""),
        executor_memory=env.get("SPARK_EXECUTOR_MEMORY", "2g"),
        cores_max=int(env.get("SPARK_CORES_MAX", "0")),
        driver_memory=env.get("SPARK_DRIVER_MEMORY", ""),
        # The application's UI, linked from each materialization while its run lives.
        ui_enabled=True,
        delta_jars=env.get("DELTA_SPARK_JARS", ""),
    )
    landing_root = _location(env.get("LANDING_ROOT", ".data/landing"))
    landing_settings: dict[str, Any] = dict(
        root=landing_root,
        full_listing_seconds=int(env.get("LANDING_FULL_LISTING_SECONDS", "600")),
    )
    spark: SparkResource
    landing: LandingZone
    if is_object_store(root) or is_object_store(landing_root):
        from resources.object_store import S3Spark, storage_from_environment

        storage = storage_from_environment(env)
        spark = S3Spark(**spark_settings, s3=storage)
    else:
        spark = SparkResource(**spark_settings)
    if is_object_store(root):
        from resources.object_store import S3Lakehouse

        lakehouse: Lakehouse = S3Lakehouse(root=root, engine=engine, spark=spark, s3=storage)
    else:
        lakehouse = Lakehouse(root=root, engine=engine, spark=spark)
    if is_object_store(landing_root):
        from resources.s3_landing import S3LandingZone

        queue_url = env.get("LANDING_QUEUE_URL", "")
        landing = S3LandingZone(**landing_settings, s3=storage, queue_url=queue_url)
    else:
        landing = LandingZone(**landing_settings)
    return {
        "spark": spark,
        "lakehouse": lakehouse,
        "landing": landing,
        "telemetry_settings": telemetry.TelemetrySettings(compute=_compute(env)),
        "payments_settings": database.PaymentsSettings(),
        "session_settings": database.SessionSettings(),
        "event_settings": warehouse.EventSettings(),
        "manifest_settings": warehouse.ManifestSettings(),
    }


def build_definitions(env: Mapping[str, str]) -> dg.Definitions:
    # Every asset, job and schedule declared at module scope anywhere under assets/:
    # adding one touches its own module, never a list here. Dagster's loader is a preview
    # in 1.13 (pinned below 1.14; tests/test_definitions.py lists what it must find).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)
        declared = dg.load_definitions_from_package_module(assets)
    built = with_catalog_policy(
        [a for a in declared.assets or () if isinstance(a, dg.AssetsDefinition)]
    )
    interval = int(env.get("SENSOR_INTERVAL_SECONDS", DEFAULT_INTERVAL_SECONDS))
    return dg.Definitions(
        assets=[*built, *external_specs(built)],
        jobs=list(declared.jobs or ()),
        # The file and automation sensors' tick interval (SENSOR_INTERVAL_SECONDS, default
        # 30): the demo's code location ticks every few seconds.
        sensors=[*every(interval, sensors), automation_sensor(interval)],
        schedules=list(declared.schedules or ()),
        resources=build_resources(env),
        # One process per run: every step shares the run's one Spark session (the default
        # multiprocess executor would boot a JVM per step).
        executor=dg.in_process_executor,
    )


@dg.definitions
@functools.cache
def defs() -> dg.Definitions:
    # Built once per process: Dagster loads the definitions several times in one run
    # (six in `dagster asset materialize`), and the environment does not change meanwhile.
    return build_definitions(os.environ)
