"""The updates part of the demo: daily change files for `devices` (Merger) and
`device_catalog` (Stateful Merger) land, the `change_files` sensor launches their days
(the catalog's as one run that merges them in order), and a corrected catalog day
delivered late makes the catalog restore to the day before and merge it and the days
after it again, in one run. Both tables come out equal to the changes folded here in
Python, straight from the generated files."""

from __future__ import annotations

import datetime as dt
import json
import random
import time

from assets.updates.change_files import (
    CATALOG_COLUMNS,
    DEVICE_COLUMNS,
    device_catalog_path,
    devices_cdc_path,
)
from demo.dagster_dev import Dagster, Launched
from demo.landing_files import LandingFiles
from demo.report import checksum
from sensors import change_files

TYPES = ["phone", "tablet", "watch"]
BRANDS = ["Acme", "Globex", "Initech", "Umbrella"]
CPUS = ["Snapdragon", "Tensor", "Exynos", "Dimensity"]


def _cdc_day(day: dt.date, rng: random.Random) -> list[tuple[str, str, str, bool]]:
    """(type, full_name, version, is_deleted) lines: new devices, renames, deletions."""
    lines = []
    for _ in range(30):
        kind, version = rng.choice(TYPES), str(rng.randrange(1, 25))
        deleted = rng.random() < 0.15
        lines.append((kind, f"{kind.title()} {version} rev {day:%m%d}", version, deleted))
    return lines


def _catalog_day(day: dt.date, rng: random.Random, *, corrected: bool = False) -> list[dict]:
    rows = []
    for _ in range(25):
        model = rng.randrange(60)
        rows.append(
            {
                "id": f"m{model:03d}",
                "brand_name": rng.choice(BRANDS),
                "full_name": f"Model {model} ({day:%b %d}{', corrected' if corrected else ''})",
                "processor_brand": rng.choice(CPUS),
            }
        )
    return rows


def _write_cdc(files: LandingFiles, day: dt.date, lines) -> None:
    body = "".join(f"{t};{n};{v};{str(d).lower()}\n" for t, n, v, d in lines)
    files.write(devices_cdc_path(day), "type;full_name;version;is_deleted\n" + body)


def _write_catalog(files: LandingFiles, day: dt.date, rows: list[dict]) -> None:
    files.write(
        device_catalog_path(day), "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)
    )


def expected_devices(days: dict[dt.date, list]) -> set[tuple[str, str, str]]:
    """The Merger's result: each day in order, a key's last line wins within a day; a
    deletion removes the device, a deleted device is never inserted."""
    table: dict[tuple[str, str], str] = {}
    for day in sorted(days):
        last = {(t, v): (n, d) for t, n, v, d in days[day]}
        for (kind, version), (name, deleted) in last.items():
            if deleted:
                table.pop((kind, version), None)
            else:
                table[(kind, version)] = name
    return {(kind, name, version) for (kind, version), name in table.items()}


def expected_catalog(days: dict[dt.date, list[dict]]) -> set[tuple[str, ...]]:
    """The Stateful Merger's result: the days merged in date order, whatever order they
    (or their corrections) arrived in."""
    table: dict[str, dict] = {}
    for day in sorted(days):
        for row in days[day]:
            table[row["id"]] = row
    return {tuple(row[c] for c in CATALOG_COLUMNS) for row in table.values()}


def _table(lakehouse, table: str, columns: tuple[str, ...]) -> set[tuple[str, ...]]:
    return {tuple(row[c] for c in columns) for row in lakehouse.read_arrow(table).to_pylist()}


def show(launched: list[Launched], what: str) -> None:
    print(f"   change_files sensor launched {len(launched)} run(s) ({what}):")
    for run in launched:
        print(f"   {run.job_name:<19} {run.partition_key:<23} {run.tags['updates/trigger']}")


def run(dagster: Dagster, resources: dict, days: list[dt.date]) -> dict[str, str]:
    """Prints its part of the report; returns each table's content checksum (or "MISMATCH").
    The third of `days` is corrected late."""
    files, lakehouse = LandingFiles(resources["landing"]), resources["lakehouse"]
    sensor = [change_files.name]
    rng = random.Random(11)
    cdc = {day: _cdc_day(day, rng) for day in days}
    catalog = {day: _catalog_day(day, rng) for day in days}
    since = time.time()
    for folder in ("devices_cdc", "device_catalog"):
        files.remove_folder(folder)
    for day in days:
        _write_cdc(files, day, cdc[day])
        _write_catalog(files, day, catalog[day])
    print(
        f"5. Updates: {len(days)} days of devices_cdc/*.csv and device_catalog/*.jsonl "
        f"({days[0]} .. {days[-1]})."
    )
    show(dagster.settle(sensor, since), "each a range merged day by day in date order")
    corrected = days[2]
    catalog[corrected] = _catalog_day(corrected, random.Random(99), corrected=True)
    since = time.time()
    _write_catalog(files, corrected, catalog[corrected])
    print(f"   A corrected {device_catalog_path(corrected)} lands late ...")
    show(dagster.settle(sensor, since), "restores the day before, merges it and the days after")
    checksums = {}
    for table, got, want in (
        ("devices", _table(lakehouse, "devices", DEVICE_COLUMNS), expected_devices(cdc)),
        (
            "device_catalog",
            _table(lakehouse, "device_catalog", CATALOG_COLUMNS),
            expected_catalog(catalog),
        ),
    ):
        same = got == want
        checksums[table] = checksum(got) if same else "MISMATCH"
        print(
            f"   {table}: {len(got)} rows, content checksum {checksum(got)}; equal to the "
            f"changes folded in date order: {'yes' if same else 'NO'}"
        )
    print()
    return checksums
