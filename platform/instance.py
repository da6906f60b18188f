"""Writes the Dagster instance's configuration, `DAGSTER_HOME/dagster.yaml`:
`platform/dagster.yaml` with storage in SQLite under DAGSTER_HOME, its event log kept
open between events (resources/event_log.py), or, when `DAGSTER_POSTGRES_URL` is set,
with run, event-log and schedule storage in that Postgres database (Dagster's
`storage: postgres`, from the `dagster-postgres` package).

The file names the variable, never its value: Dagster reads the URL, password included,
from the environment each time it loads the instance.

Run: `python platform/instance.py <DAGSTER_HOME>` (`make setup`, and so `make dev` and
`make demo`, do it).
"""

from __future__ import annotations

import json
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
"""

SQLITE_EVENT_LOG = """
# Runs and schedules in SQLite under DAGSTER_HOME (Dagster's default); the event log in
# Dagster's own SQLite files there, with connections kept open between events
# (`python platform/instance.py` writes this file).
event_log_storage:
  module: resources.event_log
  class: KeptConnectionsEventLogStorage
  config:
    base_dir: {base_dir}
"""


def instance_yaml(home: Path, environ: Mapping[str, str]) -> str:
    """The configuration of the instance in `home` for this environment."""
    text = BASE.read_text(encoding="utf-8")
    if environ.get(POSTGRES_URL):
        return text + POSTGRES_STORAGE
    # Where Dagster's default SQLite storage keeps its event log.
    return text + SQLITE_EVENT_LOG.format(base_dir=json.dumps(str(home / "history" / "runs")))


def write_instance(home: Path, environ: Mapping[str, str]) -> Path:
    """`home/dagster.yaml` for this environment (left untouched when already so)."""
    home = home.absolute()
    home.mkdir(parents=True, exist_ok=True)
    target = home / "dagster.yaml"
    text = instance_yaml(home, environ)
    if not target.is_file() or target.read_text(encoding="utf-8") != text:
        target.write_text(text, encoding="utf-8")
    return target


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    written = write_instance(Path(sys.argv[1]), os.environ)
    storage = "Postgres" if os.environ.get(POSTGRES_URL) else "SQLite"
    print(f"Dagster instance: {written} (storage: {storage})")
