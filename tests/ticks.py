"""One sensor tick evaluated the way the Dagster daemon evaluates it, for the tests and
the benchmarks (test support, so not in the package): the sensor runs against the
instance, and the dynamic partitions it asks for are added to the instance before any of
its runs would launch. (`dg.build_sensor_context` evaluates a sensor but leaves applying
its partition requests to the daemon, which these callers stand in for.)"""

from collections.abc import Mapping
from typing import Any

import dagster as dg


def evaluate_tick(
    sensor: dg.SensorDefinition,
    instance: dg.DagsterInstance,
    cursor: str | None,
    resources: Mapping[str, Any],
) -> dg.SensorResult:
    with dg.build_sensor_context(
        instance=instance, cursor=cursor, resources=dict(resources)
    ) as context:
        result = sensor(context)
    for request in result.dynamic_partitions_requests:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    return result
