"""Progress of a long step in the run's log: one line per phase, naming what the phase did
(files, rows, commits) and how long it took, so a person watching a run sees where it is
and where its time goes. A phase that fails says so, with its time, before the error."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import dagster as dg


class Progress:
    def __init__(self, log: dg.DagsterLogManager, scope: str) -> None:
        self._log = log
        self._scope = scope

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[dict[str, Any]]:
        """A phase of the step; fill the yielded dict with the facts its line names."""
        facts: dict[str, Any] = {}
        started = time.monotonic()
        try:
            yield facts
        except BaseException:
            self._log.info(f"{self._scope}: {name} failed after {_seconds(started)}")
            raise
        said = ", ".join(f"{key} {_value(value)}" for key, value in facts.items())
        detail = f" ({said})" if said else ""
        self._log.info(f"{self._scope}: {name}{detail} in {_seconds(started)}")


def _seconds(started: float) -> str:
    return f"{time.monotonic() - started:.1f} s"


def _value(value: Any) -> Any:
    return getattr(value, "value", value)
