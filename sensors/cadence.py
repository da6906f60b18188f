"""How often the file sensors tick: 30 s by default, or what the deployment says.

A sensor's interval is fixed when it is defined, yet it is the deployment's choice: the
demo's code location ticks every few seconds, so files it lands are taken in at once,
and a busy production one may tick less often. So a file sensor is declared with
`file_sensor(...)` (the arguments of `dg.sensor` but the interval), and `every(seconds)`
defines the same sensors again with another interval, through the same public decorator.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import dagster as dg

DEFAULT_INTERVAL_SECONDS = 30
_DECLARED: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {}


def file_sensor(**arguments: Any) -> Callable[[Callable[..., Any]], dg.SensorDefinition]:
    """`dg.sensor(**arguments)` ticking every DEFAULT_INTERVAL_SECONDS; `every` can define
    it again with another interval."""

    def define(evaluation: Callable[..., Any]) -> dg.SensorDefinition:
        _DECLARED[evaluation.__name__] = (evaluation, arguments)
        return dg.sensor(minimum_interval_seconds=DEFAULT_INTERVAL_SECONDS, **arguments)(evaluation)

    return define


def every(seconds: int, sensors: Sequence[dg.SensorDefinition]) -> list[dg.SensorDefinition]:
    """`sensors` with the file sensors among them ticking every `seconds` (the others, with
    intervals of their own, as they are)."""
    if seconds < 1:
        raise ValueError(f"a sensor interval is a whole number of seconds >= 1, not {seconds}")
    timed = []
    for sensor in sensors:
        declared = _DECLARED.get(sensor.name)
        if declared is None or seconds == sensor.minimum_interval_seconds:
            timed.append(sensor)
            continue
        evaluation, arguments = declared
        timed.append(dg.sensor(minimum_interval_seconds=seconds, **arguments)(evaluation))
    return timed
