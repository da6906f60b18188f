"""The warehouse part of the demo, both driven by their sensors in `dagster dev`:

- event batches land out of order and at once (their runs go side by side), one of them
  twice under another name, with newer and older versions of events and deletions; each
  is staged, audited and published into `user_events` (write-audit-publish), which must
  keep each event's newest version;
- enriched run directories are registered once finished (`_SUCCESS`), staged and loaded
  through the load manifest; one still being written waits until it is done.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import time
from collections import Counter

from assets.warehouse import enriched_runs
from assets.warehouse.manifest import load_manifest
from assets.warehouse.manifest.enriched import SUCCESS, run_folder
from assets.warehouse.manifest.loader import DEFAULT_EVENT_TABLES, warehouse_table
from demo.dagster_dev import Dagster
from demo.landing_files import LandingFiles
from demo.report import checksum
from sensors import enriched_run_directories, event_batch_files

EVENTS = 60
EVENTS_PER_RUN = 45


def enriched_run_ids(start: dt.datetime) -> list[str]:
    """Three runs of the enrichment job, an hour apart, named by their start time."""
    return [f"{start + dt.timedelta(hours=h):%Y-%m-%d-%H-%M-%S}" for h in (1, 2, 3)]


def _event(event_id: str, when: dt.datetime, ingested: dt.datetime, **fields) -> dict:
    return {
        "event_id": event_id,
        "user_id": f"user-{int(event_id[1:]) % 9}",
        "event_timestamp": when.isoformat(),
        "ingestion_time": ingested.isoformat(),
        "payload": fields.pop("payload", {"page": f"/p/{event_id}"}),
        **fields,
    }


def _batches(start: dt.datetime, rng: random.Random) -> dict[str, list[dict]]:
    """Three batches: first versions; newer versions of some events and deletions of
    others; stale (older) versions that must lose wherever they land."""
    ids = [f"e{i:03d}" for i in range(EVENTS)]
    first = {i: start + dt.timedelta(minutes=rng.randrange(600)) for i in ids}
    ingested = start + dt.timedelta(days=1)
    b1 = [_event(i, first[i], ingested) for i in ids]
    newer = rng.sample(ids, 15)
    deleted = rng.sample([i for i in ids if i not in newer], 5)
    b2 = [
        _event(i, first[i] + dt.timedelta(hours=1), ingested, payload={"page": "/v2"})
        for i in newer
    ] + [
        _event(i, first[i] + dt.timedelta(hours=2), ingested, op="delete", payload={})
        for i in deleted
    ]
    stale = rng.sample(newer, 6)
    b3 = [
        _event(i, first[i] - dt.timedelta(hours=1), ingested, payload={"page": "/stale"})
        for i in stale
    ]
    return {f"{start:%Y-%m-%d}-a": b1, f"{ingested:%Y-%m-%d}-b": b2, f"{ingested:%Y-%m-%d}-c": b3}


def expected_events(batches: dict[str, list[dict]]) -> set[tuple]:
    """(event_id, user_id, event_timestamp, is_deleted) of each event's newest version."""
    newest: dict[str, dict] = {}
    for rows in batches.values():
        for row in rows:
            known = newest.get(row["event_id"])
            if known is None or row["event_timestamp"] > known["event_timestamp"]:
                newest[row["event_id"]] = row
    return {
        (
            r["event_id"],
            r["user_id"],
            dt.datetime.fromisoformat(r["event_timestamp"]),
            r.get("op") == "delete",
        )
        for r in newest.values()
    }


def run_events(dagster: Dagster, resources: dict, start: dt.datetime) -> dict[str, str]:
    files, lakehouse = LandingFiles(resources["landing"]), resources["lakehouse"]
    batches = _batches(start, random.Random(31))
    since = time.time()
    files.remove_folder("events")

    def land(batch_id: str, rows: list[dict]) -> None:
        files.write(
            f"events/{batch_id}.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)
        )

    names = list(batches)
    print(
        f"9. Event batches: {sum(map(len, batches.values()))} events in {len(names)} batches "
        "(first versions; newer versions and deletions; stale versions), landing last first,"
    )
    print("    and the first batch again under another name.")
    for batch_id, rows in [
        *((b, batches[b]) for b in reversed(names)),
        (f"{names[0]}-redelivered", batches[names[0]]),
    ]:
        land(batch_id, rows)
    runs = len(dagster.settle([event_batch_files.name], since))
    stored = lakehouse.read_arrow(
        "user_events", columns=["event_id", "user_id", "event_timestamp", "is_deleted"]
    ).to_pylist()
    got = {tuple(r.values()) for r in stored}
    same = got == expected_events(batches) and len(stored) == len(got)
    print(
        f"    event_batch_files sensor launched {runs} run(s), each staging, auditing and "
        f"publishing the batches new to a tick, one commit per batch. user_events: "
        f"{len(stored)} events, {sum(r['is_deleted'] for r in stored)} deleted; each at its "
        f"newest version: {'yes' if same else 'NO'}; content checksum {checksum(got)}\n"
    )
    return {"user_events": checksum(got) if same else "MISMATCH"}


def _write_run(
    files: LandingFiles, run_id: str, when: str, rng: random.Random, *, done: bool
) -> Counter:
    folder = run_folder(run_id)
    kinds = Counter()
    lines = []
    for i in range(EVENTS_PER_RUN):
        kind = rng.choice(sorted(DEFAULT_EVENT_TABLES))
        fields = {
            "page_view": {"page_url": f"/p/{i}", "referrer": rng.choice(["ads", None])},
            "link_click": {"target_url": f"https://example.com/{i}"},
            "purchase": {"order_id": f"o-{run_id}-{i}", "amount": "19.90", "currency": "EUR"},
        }[kind]
        lines.append(
            {
                "event_type": kind,
                "event_id": f"{run_id}-{i:03d}",
                "user_id": f"user-{i % 11}",
                "event_timestamp": when,
                **fields,
            }
        )
        kinds[kind] += 1
    files.write(f"{folder}/part-00000.json", "".join(json.dumps(e) + "\n" for e in lines))
    if done:
        files.write(f"{folder}/{SUCCESS}", "")
    return kinds


def run_enriched(dagster: Dagster, resources: dict, start: dt.datetime) -> dict[str, str]:
    files, lakehouse = LandingFiles(resources["landing"]), resources["lakehouse"]
    instance = dagster.instance
    sensor = [enriched_run_directories.name]
    rng = random.Random(41)
    run_ids = enriched_run_ids(start)
    when = f"{start + dt.timedelta(hours=1):%Y-%m-%dT%H:%M:%SZ}"
    expected: Counter = Counter()
    since = time.time()
    files.remove_folder("enriched")
    for index, run_id in enumerate(run_ids):
        expected += _write_run(files, run_id, when, rng, done=index < 2)
    print(
        f"10. Enriched runs: {len(run_ids)} run directories, the last still being "
        "written (no _SUCCESS yet)."
    )
    known = set(instance.get_dynamic_partitions(enriched_runs.name)) & set(run_ids)
    runs = len(dagster.settle(sensor, since))
    earlier = f" ({len(known)} registered by an earlier demo)" if known else ""
    print(
        f"    enriched_run_directories sensor launched {runs} runs; the unfinished one "
        f"waits{earlier}."
    )
    since = time.time()
    files.write(f"{run_folder(run_ids[-1])}/{SUCCESS}", "")
    print(f"    Its _SUCCESS lands: {len(dagster.settle(sensor, since))} more run(s).")
    states = Counter(r.state for r in load_manifest.read(lakehouse, run_ids).values())
    loaded = {
        kind: lakehouse.count(warehouse_table(kind), where=None)
        if lakehouse.exists(warehouse_table(kind))
        else 0
        for kind in sorted(DEFAULT_EVENT_TABLES)
    }
    content = {
        tuple(r.values())
        for kind in sorted(DEFAULT_EVENT_TABLES)
        for r in lakehouse.read_arrow(
            warehouse_table(kind), columns=["run_id", "event_id"]
        ).to_pylist()
    }
    same = loaded == {k: expected[k] for k in loaded} and states == Counter(
        {load_manifest.LOADED: len(run_ids)}
    )
    print(
        f"    load_manifest: {dict(states)}; warehouse rows by type {loaded}, equal to the "
        f"events written: {'yes' if same else 'NO'}; content checksum {checksum(content)}\n"
    )
    return {"warehouse events": checksum(content) if same else "MISMATCH"}


def run(dagster: Dagster, resources: dict, start: dt.datetime) -> dict[str, str]:
    """Prints its part of the report; returns each table's content checksum (or
    "MISMATCH"). Everything happens on the day of `start` and the day after."""
    return {
        **run_events(dagster, resources, start),
        **run_enriched(dagster, resources, start),
    }
