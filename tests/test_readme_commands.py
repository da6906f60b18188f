"""Every CLI command README.md and docs/ give, run as written: each `.venv/bin/dagster` line
of their bash blocks, with the config files of their yaml blocks, on a scratch Dagster
home, lakehouse and landing zone (the commands are the same on either engine; delta-rs
here)."""

from __future__ import annotations

import datetime as dt
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import dagster as dg

from assets.overwriting.data_overwrite import VISITS_DAILY
from assets.warehouse.manifest.load_manifest import LOAD_MANIFEST
from demo.dates import DemoDates
from demo.generate import write_initial_files
from demo.landing_files import LandingFiles
from resources import Lakehouse, LandingZone

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DOCS = [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").glob("*.md"))]
DOCS_TEXT = "\n".join(path.read_text(encoding="utf-8") for path in DOCS)
"""The README and the docs, whose commands are run here."""
COMMAND = ".venv/bin/dagster "
README_DEMO_START = dt.date(2024, 12, 2)
"""The demo start whose days README's commands name (`DEMO_START=2024-12-02`)."""


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOCS_TEXT, flags=re.DOTALL)


def readme_commands() -> list[str]:
    return [
        line for block in blocks("bash") for line in block.splitlines() if line.startswith(COMMAND)
    ]


def readme_config_files() -> dict[str, str]:
    """The yaml blocks whose first line names their file (`# restore.yaml`)."""
    files = {}
    for block in blocks("yaml"):
        first, _, body = block.partition("\n")
        if first.startswith("# ") and first.endswith(".yaml"):
            files[first[2:]] = body
    return files


def run(command: str, env: dict[str, str], configs: Path) -> subprocess.CompletedProcess:
    args = shlex.split(command.removeprefix(COMMAND))
    # A config file named in the command is the README's own, written to scratch.
    args = [str(configs / a) if (configs / a).exists() else a for a in args]
    return subprocess.run(
        [sys.executable, "-m", "dagster", *args],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_readme_names_the_commands_this_test_runs():
    commands = readme_commands()
    assert [shlex.split(c)[1:3] for c in commands] == [
        ["asset", "materialize"],
        ["job", "execute"],
        ["job", "execute"],
    ]
    assert set(readme_config_files()) == {"restore.yaml", "skip.yaml"}


def test_every_readme_cli_command_works_as_written(tmp_path, spark, spark_remote):
    configs = tmp_path / "configs"
    configs.mkdir()
    for name, body in readme_config_files().items():
        (configs / name).write_text(body)
    landing = LandingFiles(LandingZone(root=str(tmp_path / "landing")))
    write_initial_files(landing, DemoDates(README_DEMO_START).visit_days)
    home = tmp_path / "dagster_home"
    home.mkdir()
    lakehouse = Lakehouse(root=str(tmp_path / "lakehouse"), engine="delta-rs", spark=spark)
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "LAKEHOUSE_ROOT": lakehouse.root,
        "LAKEHOUSE_ENGINE": lakehouse.engine,
        "LANDING_ROOT": str(tmp_path / "landing"),
        # As under `make dev`: the commands attach to the long-lived Spark.
        **spark_remote,
    }
    backfill, restore, skip = readme_commands()

    done = run(backfill, env, configs)
    assert done.returncode == 0, done.stdout + done.stderr
    days = lakehouse.read_arrow(VISITS_DAILY).column("event_date").to_pylist()
    assert sorted({d.isoformat() for d in days}) == ["2024-12-02", "2024-12-03", "2024-12-04"]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        records = instance.fetch_materializations(dg.AssetKey(VISITS_DAILY), limit=10).records
    assert len({r.run_id for r in records}) == 1 and len(records) == 3

    done = run(restore, env, configs)
    assert done.returncode == 0, done.stdout + done.stderr
    days = lakehouse.read_arrow(VISITS_DAILY).column("event_date").to_pylist()
    # The day is back to before its first materialization; the other two keep theirs.
    assert sorted({d.isoformat() for d in days}) == ["2024-12-02", "2024-12-04"]

    done = run(skip, env, configs)
    assert done.returncode == 0, done.stdout + done.stderr
    [row] = lakehouse.read_arrow(LOAD_MANIFEST).to_pylist()
    assert (row["run_id"], row["to_skip"], row["skip_reason"]) == (
        "2024-05-01-10-00-00",
        True,
        "known bad export",
    )


def test_plain_dagster_commands_in_the_project_use_its_instance(tmp_path):
    """Without DAGSTER_HOME, `dagster dev` and the other commands run in the project's
    folder use the instance set-up made (`.env`), not a temporary one; a DAGSTER_HOME
    that is set still wins."""
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    plain = subprocess.run(
        [sys.executable, "-m", "dagster", "instance", "info"],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert plain.returncode == 0, plain.stderr
    project_home = PROJECT_ROOT / ".data" / "dagster"
    assert f"$DAGSTER_HOME: {project_home}\n" in plain.stdout
    # Its configuration is the project's: one run per telemetry subject, for one.
    assert "telemetry/subject" in plain.stdout
    elsewhere = subprocess.run(
        [sys.executable, "-m", "dagster", "instance", "info"],
        env={**env, "DAGSTER_HOME": str(tmp_path)},
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert f"$DAGSTER_HOME: {tmp_path}\n" in elsewhere.stdout
