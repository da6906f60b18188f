"""Test data builders shared by the test modules (kept out of production code)."""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib.util
import os
import subprocess
import sys
from collections.abc import Collection, Mapping
from pathlib import Path

import dagster as dg
from telemetry_history import write

from demo.landing_files import LandingFiles
from resources import Lakehouse, LandingZone, SparkResource
from resources.landing import FileStat

DELTA_JARS = os.environ.get("DELTA_SPARK_JARS", "")
PROJECT_ROOT = Path(__file__).resolve().parents[1]


def platform_module(name: str):
    """`platform/<name>.py` loaded as a module (`platform/` is not a package: it would
    shadow the stdlib module)."""
    spec = importlib.util.spec_from_file_location(
        f"lakehouse_{name}", PROJECT_ROOT / "platform" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def instance_home(home: Path) -> Path:
    """`home` holding the instance configuration `make setup` writes (with SQLite storage),
    created when missing."""
    platform_module("instance").write_instance(home, {})
    return home


class NoSpark(SparkResource):
    """A Spark resource that fails whoever asks it for a session: proves that code which
    must never start a JVM (sensors) does not."""

    def session(self):
        raise AssertionError("started Spark where no Spark may start")


def sensor_resources(landing: LandingZone) -> dict:
    """What a file sensor gets in a deployment whose engine is delta-spark, with Spark
    out of reach: the test's landing zone and the lakehouse beside it (the `lakehouse`
    fixture's root)."""
    root = Path(landing.root).parent / "lakehouse"
    return {
        "landing": landing,
        "lakehouse": Lakehouse(root=str(root), engine="delta-spark", spark=NoSpark()),
    }


def run_process_env(
    home: Path, lakehouse, landing, spark: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a separate run process (`dagster asset materialize`) on this
    test's Dagster home, lakehouse (with its engine) and landing zone; `spark`: the
    variables of the long-lived Spark to attach to (the `spark_remote` fixture), else the
    run boots a local Spark of its own."""
    return {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "LAKEHOUSE_ROOT": lakehouse.root,
        "LAKEHOUSE_ENGINE": lakehouse.engine,
        "LANDING_ROOT": landing.root,
        **(spark or {"SPARK_MASTER": "local[1]"}),
    }


def materialize_side_by_side(
    home: Path,
    lakehouse,
    landing,
    selections: list[list[str]],
    *,
    spark: Mapping[str, str] | None = None,
    timeout: float = 1500,
) -> list[str]:
    """`dagster asset materialize -f platform/definitions.py <selection>` for each of
    `selections`, all at once, each in its own process as the run launcher starts runs,
    on a fresh Dagster home; asserts every one succeeded and returns their outputs."""
    home.mkdir()
    with dg.DagsterInstance.from_config(str(home)):
        pass  # creates the instance's storage once, as `dagster dev` would
    env = run_process_env(home, lakehouse, landing, spark)
    return materialize_all(env, selections, timeout=timeout)


def materialize_all(
    env: Mapping[str, str], selections: list[list[str]], *, timeout: float = 1500
) -> list[str]:
    """`dagster asset materialize -f platform/definitions.py <selection>` for each of
    `selections`, all at once, each in its own process with `env`, as a user or the run
    launcher starts them; asserts every one succeeded and returns their outputs."""
    definitions = PROJECT_ROOT / "platform" / "definitions.py"
    command = [sys.executable, "-m", "dagster", "asset", "materialize", "-f", str(definitions)]
    runs = [
        subprocess.Popen(
            [*command, *selection],
            env=dict(env),
            cwd=PROJECT_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for selection in selections
    ]
    try:
        outputs = [run.communicate(timeout=timeout)[0] for run in runs]
    finally:
        for run in runs:
            if run.poll() is None:
                run.kill()
    assert [run.returncode for run in runs] == [0] * len(runs), [o[-3000:] for o in outputs]
    return outputs


class VanishingListing(LandingZone):
    """A landing zone whose listing still shows files deleted since: the race between a
    run's listing and its reading, made to happen every time."""

    vanished: str = ""
    """The paths shown although gone, one per line."""

    def list(self, prefix: str, *, suffix: str = "", recursive: bool = True) -> list[FileStat]:
        listed = super().list(prefix, suffix=suffix, recursive=recursive)
        gone = [
            FileStat(path, 100, 1)
            for path in self.vanished.splitlines()
            if path.startswith(prefix.rstrip("/") + "/")
            and path.endswith(suffix)
            and (recursive or "/" not in path[len(prefix.rstrip("/")) + 1 :])
        ]
        return sorted([*listed, *gone], key=lambda s: s.path)


def table_contents(
    lakehouse: Lakehouse,
    *,
    without_columns: Collection[str] = (),
    without_tables: Collection[str] = (),
) -> dict[str, str]:
    """A digest of the rows of every Delta table under the lakehouse root, data and
    control, in a fixed order, by table (leaving out `without_columns` and the tables
    named in `without_tables`)."""
    root = Path(lakehouse.root)
    found = {}
    for log in sorted(root.rglob("_delta_log")):
        name = str(log.parent.relative_to(root))
        if name in without_tables:
            continue
        rows = [
            repr(sorted((k, v) for k, v in row.items() if k not in without_columns))
            for row in lakehouse.read_arrow(name).to_pylist()
        ]
        found[name] = hashlib.sha256("\n".join(sorted(rows)).encode()).hexdigest()[:16]
    return found


def land(landing: LandingZone, path: str, content: bytes) -> None:
    """Land a file as a writer would: a local file (its mtime moved on, so a same-second
    rewrite is still seen) or, under an `s3://` root, an object."""
    if landing.local:
        write(landing.root, path, content)
    else:
        LandingFiles(landing).write(path, content)


def visit(
    visit_id: str, when: dt.datetime, *, user: str = "u1", page: str = "/home", **extra
) -> dict:
    record = {
        "visit_id": visit_id,
        "user_id": user,
        "event_time": when.isoformat(),
        "page": page,
    }
    record.update(extra)
    return record


def day_of_visits(day: dt.date, count: int, *, prefix: str = "v") -> list[dict]:
    """`count` visits spread over `day` (UTC)."""
    start = dt.datetime.combine(day, dt.time(0, 0), tzinfo=dt.UTC)
    step = dt.timedelta(seconds=86_399 // max(count, 1))
    return [
        visit(f"{prefix}{day:%Y%m%d}-{i}", start + i * step, user=f"u{i % 7}", page=f"/p{i % 5}")
        for i in range(count)
    ]


def partition_range(first: object, last: object) -> dict[str, str]:
    """Run tags of one run over the partitions `first` to `last`, as a single-run
    backfill (the UI's, or `dagster asset materialize --partition-range`) launches it."""
    return {
        "dagster/asset_partition_range_start": str(first),
        "dagster/asset_partition_range_end": str(last),
    }
