"""Deterministic replay: the same files delivered in order, shuffled and late, three
times over, or growing by appends across many sensor ticks, converge to the same tables,
equal to totals computed independently from the generated history."""

from __future__ import annotations

import random

import pytest
from telemetry_history import (
    expected_hourly,
    expected_totals,
    history,
    out_of_order_share,
    shuffled,
)

SUBJECTS = ["Tool01", 'Tool 02 "west"', "Prüfstand-ß"]


@pytest.fixture(
    params=[
        "delta-rs",
        # Each replay is dozens of runs of several small commits, about 0.6 s each
        # through Spark: on delta-spark they run with `make test-slow` (test_behaviour
        # covers every telemetry behaviour on both engines in `make test`).
        pytest.param("delta-spark", marks=[pytest.mark.delta_spark, pytest.mark.slow]),
    ]
)
def engine(request) -> str:
    return request.param


FILES = history(SUBJECTS, files_per_subject=5, rows_per_file=30)


def deliver_in_batches(deployment, files, batch=4):
    for start in range(0, len(files), batch):
        deployment.deliver(files[start : start + batch])
        deployment.run_pending()


def in_order(deployment):
    deliver_in_batches(deployment, FILES)


def shuffled_and_late(deployment):
    order = shuffled(FILES)
    assert 0.25 <= out_of_order_share(order) <= 0.5  # about 38% arrive out of order
    deliver_in_batches(deployment, order, batch=3)


def three_times(deployment):
    order = shuffled(FILES, seed=18)
    for start in range(0, len(order), 5):
        batch = order[start : start + 5]
        for _ in range(3):
            deployment.deliver(batch)  # duplicated delivery: same path, same bytes
            deployment.run_pending()


def growing_by_appends(deployment):
    """Every file written in 3 chunks cut at arbitrary bytes (so lines are half-written
    between ticks), chunks of different files interleaved."""
    rng = random.Random(3)
    cuts = {}
    for f in FILES:
        size = len(f.content)
        cuts[f.path] = sorted(rng.sample(range(1, size), 2)) + [size]
    for step in range(3):
        for start in range(0, len(FILES), 8):
            for f in FILES[start : start + 8]:
                deployment.write(f.path, f.content[: cuts[f.path][step]])
            deployment.run_pending()


def regimes(deployment) -> set[str]:
    return {
        deployment.metadata(run, "telemetry_running_totals")["regime"] for run in deployment.runs
    }


def changes(deployment) -> set[str]:
    return {
        kind
        for run in deployment.runs
        for kind in deployment.metadata(run, "telemetry_raw")["changes"].values()
    }


# What each delivery must have made happen, or its replay proves less than it claims:
# late data and appends, seen in the runs' own metadata.
EXERCISED = {
    shuffled_and_late: lambda deployment: {"first", "append", "late"} <= regimes(deployment),
    growing_by_appends: lambda deployment: {"append"} <= changes(deployment),
}


@pytest.mark.parametrize(
    "delivery",
    [
        # The clean delivery, which every other one must equal, runs with the slow tests:
        # the others converge to the same independent totals, and test_behaviour ingests
        # files in order throughout.
        pytest.param(in_order, marks=pytest.mark.slow),
        shuffled_and_late,
        three_times,
        growing_by_appends,
    ],
)
def test_every_delivery_converges_to_the_independent_totals(deployment, delivery):
    delivery(deployment)
    exercised = EXERCISED.get(delivery)
    assert exercised is None or exercised(deployment)
    assert deployment.run_pending() == []  # settled: nothing left to do
    assert deployment.totals() == expected_totals(FILES)
    assert deployment.totals_by_sql() == deployment.totals()  # every reader, the same rows
    assert deployment.hourly() == expected_hourly(FILES)
    assert len(deployment.raw()) == sum(len(f.rows) for f in FILES)
    assert {s.status for s in deployment.states().values()} == {"ingested"}
