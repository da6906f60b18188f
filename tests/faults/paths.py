"""The write paths the SIGKILL trials kill: for each, the assets a run materializes, the
partition and the new input of trial `n`, and the resources its run gets.

Every trial brings input a run has not committed yet, so each trial's run writes: a day
re-written with one more file (visits), a new day of changes (devices), a new catalog day
or a corrected latest day, which restores before it merges (device_catalog), a new or a
grown report file (telemetry), a new day of payments with replays of the day before
(payments), a new event batch (events)."""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
from telemetry_deployment import TELEMETRY_ASSETS

from assets.database import PaymentsSettings, payments
from assets.overwriting import visits_daily
from assets.telemetry import TelemetrySettings, subjects
from assets.updates import device_catalog, devices
from assets.warehouse import EventSettings, event_batches, user_events, user_events_staging
from assets.warehouse.events_source import batch_file
from resources import Lakehouse, LandingZone, SparkResource

START = dt.date(2024, 6, 3)


def _write(landing: LandingZone, path: str, body: str) -> None:
    target = Path(landing.root) / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(body, encoding="utf-8")


def _jsonl(rows: Sequence[dict]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def _visits(landing: LandingZone, trial: int) -> str:
    day = START + dt.timedelta(days=trial % 3)
    start = dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)
    rows = [
        {
            "visit_id": f"t{trial}-{i}",
            "user_id": f"u{i % 97}",
            "event_time": (start + dt.timedelta(seconds=i * 7)).isoformat(),
            "page": f"/p{i % 13}",
        }
        for i in range(3000)
    ]
    _write(landing, f"visits/date={day}/part-{trial}.jsonl", _jsonl(rows))
    return day.isoformat()


def _devices(landing: LandingZone, trial: int) -> str:
    day = START + dt.timedelta(days=trial)
    rng = random.Random(trial)
    lines = ["type;full_name;version;is_deleted"]
    for i in range(2000):
        deleted = "true" if rng.random() < 0.05 else "false"
        lines.append(f"type{i % 40};Device {i} rev {trial};{rng.randrange(300)};{deleted}")
    _write(landing, f"devices_cdc/{day}.csv", "\n".join(lines) + "\n")
    return day.isoformat()


def _catalog(landing: LandingZone, trial: int) -> str:
    """A new day, except every 4th trial: the latest day corrected, so its run restores
    the day before's state, then merges."""
    corrected = trial % 4 == 3
    day = START + dt.timedelta(days=trial - trial // 4 - (1 if corrected else 0))
    rng = random.Random(trial)
    rows = [
        {
            "id": f"d{rng.randrange(3000)}",
            "brand_name": f"Brand {i % 17}",
            "full_name": f"Device {i} of trial {trial}",
            "processor_brand": "fixed" if corrected else f"P{i % 5}",
        }
        for i in range(1500)
    ]
    _write(landing, f"device_catalog/{day}.jsonl", _jsonl(rows))
    return day.isoformat()


def _telemetry(landing: LandingZone, trial: int) -> str:
    """A new report of an hour; every 3rd trial grows the previous report instead."""
    grows = trial % 3 == 2
    number = trial - 1 if grows else trial
    start = dt.datetime(2024, 5, 1, tzinfo=dt.UTC) + dt.timedelta(hours=number)
    rows = range(1200 if grows else 600)
    lines = ["ts,in_spec,out_of_spec,mispicks"] + [
        f"{(start + dt.timedelta(seconds=3 * i)).isoformat()},{i % 5},{i % 3},{i % 2}" for i in rows
    ]
    _write(landing, f"telemetry/Tool01/report-{number:04d}.csv", "\n".join(lines) + "\n")
    return "Tool01"


def _payments(landing: LandingZone, trial: int) -> str:
    day = START + dt.timedelta(days=trial)

    def payment(d: dt.date, i: int) -> dict:
        return {
            "idempotency_key": f"pay-{d}-{i}",
            "account_id": f"acc-{i % 31}",
            "amount": f"{i % 997}.{i % 100:02d}",
            "currency": "EUR",
            "created_at": f"{d}T10:00:00+01:00",
        }

    previous = day - dt.timedelta(days=1)
    rows = [payment(day, i) for i in range(2000)] + [payment(previous, i) for i in range(100)]
    _write(landing, f"payments/date={day}/batch.jsonl", _jsonl(rows))
    return day.isoformat()


def _events(landing: LandingZone, trial: int) -> str:
    batch = f"batch-{trial:04d}"
    rows = [
        {
            "event_id": f"e{i % 1500}",
            "event_timestamp": f"2024-05-01T10:{i % 60:02d}:00+00:00",
            "ingestion_time": f"2024-05-02T00:00:{trial % 60:02d}+00:00",
            "user_id": f"u{i % 50}",
            "payload": {"page": f"/p{i % 7}", "trial": trial},
        }
        for i in range(2000)
    ]
    _write(landing, batch_file(batch), _jsonl(rows))
    return batch


@dataclass(frozen=True)
class WritePath:
    name: str
    assets: Sequence[dg.AssetsDefinition]
    land: Callable[[LandingZone, int], str]
    """Lands trial n's input; returns the partition its run materializes."""
    settings: dict[str, dg.ConfigurableResource]
    dynamic: str | None = None
    """The dynamic partitions definition its partitions are added to."""
    spark: bool = True

    def resources(self, spark: SparkResource, lakehouse: Lakehouse, landing: LandingZone) -> dict:
        return {"spark": spark, "lakehouse": lakehouse, "landing": landing, **self.settings}

    def materialize(
        self, resources: dict, partition: str, instance: dg.DagsterInstance
    ) -> dg.ExecuteInProcessResult:
        if self.dynamic and not instance.has_dynamic_partition(self.dynamic, partition):
            instance.add_dynamic_partitions(self.dynamic, [partition])
        return dg.materialize(
            list(self.assets), partition_key=partition, resources=resources, instance=instance
        )


PATHS = {
    path.name: path
    for path in [
        WritePath("visits", [visits_daily], _visits, {}),
        WritePath("devices", [devices], _devices, {}),
        WritePath("device_catalog", [device_catalog], _catalog, {}),
        WritePath(
            "telemetry",
            TELEMETRY_ASSETS,
            _telemetry,
            {"telemetry_settings": TelemetrySettings()},
            dynamic=subjects.name,
            spark=False,
        ),
        WritePath("payments", [payments], _payments, {"payments_settings": PaymentsSettings()}),
        WritePath(
            "events",
            [user_events_staging, user_events],
            _events,
            {"event_settings": EventSettings()},
            dynamic=event_batches.name,
        ),
    ]
}
