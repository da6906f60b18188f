"""Writes the Dagster instance's configuration, `DAGSTER_HOME/dagster.yaml`:
`platform/dagster.yaml` as it is (storage in SQLite under DAGSTER_HOME), or, when
`DAGSTER_POSTGRES_URL` is set, the same with run, event-log and schedule storage in that
Postgres database (Dagster's `storage: postgres`, from the `dagster-postgres` package) and
the sensors ticked in threads.

The file names the variable, never its value: Dagster reads the URL, password included,
from the environment each time it loads the instance.

Run: `python platform/instance.py <DAGSTER_HOME>` (`make setup`, and so `make dev` and
`make demo`, do it).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

POSTGRES_URL = "DAGSTER_POSTGRES_URL"
BASE = Path(__file__).with_name("dagster.yaml")
POSTGRES_STORAGE = f"""
# {POSTGRES_URL} was set when this file was written: runs, event logs and schedules are
# stored in that Postgres database (`python platform/instance.py` writes this file).
storage:
  postgres:
    postgres_url:
      env: {POSTGRES_URL}

# Postgres takes concurrent writers, so the daemon ticks its sensors side by side, each in
# a thread: a slow tick (a listing of a big bucket) no longer holds back the others' ticks,
# which the sensor loop otherwise takes one after another. The runs one tick asks for are
# submitted side by side too.
sensors:
  use_threads: true
  num_workers: 4
  num_submit_workers: 4
"""


def instance_yaml(environ: Mapping[str, str]) -> str:
    """The instance's configuration for this environment."""
    text = BASE.read_text(encoding="utf-8")
    return text + POSTGRES_STORAGE if environ.get(POSTGRES_URL) else text


def write_instance(home: Path, environ: Mapping[str, str]) -> Path:
    """`home/dagster.yaml` for this environment (left untouched when already so)."""
    home.mkdir(parents=True, exist_ok=True)
    target = home / "dagster.yaml"
    text = instance_yaml(environ)
    if not target.is_file() or target.read_text(encoding="utf-8") != text:
        target.write_text(text, encoding="utf-8")
    return target


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    written = write_instance(Path(sys.argv[1]), os.environ)
    storage = "Postgres" if os.environ.get(POSTGRES_URL) else "SQLite"
    print(f"Dagster instance: {written} (storage: {storage})")
