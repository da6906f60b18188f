"""The database and immutable part of the demo: payments inserted once per idempotency key
(a re-delivered file inserts nothing; a replay that changes a payment is refused, naming
the key, and changes nothing), launched here; then what declarative automation built
without being asked: sessions from the demo's visits, and a write-once snapshot of the
device catalog behind its proxy. Each table is compared with what it must hold, worked
out here in plain Python."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import random
import textwrap

import dagster as dg

from assets.database.payments_source import day_folder
from assets.immutable.proxy import current_snapshot, manifest_entries
from assets.updates.change_files import CATALOG_COLUMNS
from demo.dagster_dev import Dagster, Launched
from demo.dates import DemoDates
from demo.landing_files import LandingFiles
from demo.report import checksum
from demo.runs import run_job
from resources.lakehouse.predicates import is_in
from sensors.automation import AUTOMATION_SENSOR

ACCOUNTS = [f"acct-{i:02d}" for i in range(12)]


def _payments(day: dt.date, rng: random.Random) -> list[dict]:
    plus_one = dt.timezone(dt.timedelta(hours=1))
    rows = []
    for i in range(40):
        when = dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC) + dt.timedelta(
            seconds=rng.randrange(86_400)
        )
        rows.append(
            {
                "idempotency_key": f"pay-{day:%Y%m%d}-{i:03d}",
                "account_id": rng.choice(ACCOUNTS),
                "amount": f"{rng.randrange(100, 50_000) / 100:.2f}",
                "currency": rng.choice(["EUR", "USD"]),
                "created_at": when.astimezone(plus_one).isoformat(),
            }
        )
    return rows


def _write(landing: LandingFiles, day: dt.date, name: str, rows: list[dict]) -> None:
    landing.write(
        f"{day_folder(day)}/{name}", "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)
    )


def _typed(row: dict) -> tuple:
    """A payment as the table stores it: amount a decimal, the instant in UTC."""
    created = dt.datetime.fromisoformat(row["created_at"]).astimezone(dt.UTC)
    amount = decimal.Decimal(row["amount"]).quantize(decimal.Decimal("0.000001"))
    return (row["idempotency_key"], row["account_id"], amount, row["currency"], created)


def run_payments(defs, resources, instance, payment_days: list[dt.date]) -> dict[str, str]:
    files, lakehouse = LandingFiles(resources["landing"]), resources["lakehouse"]
    files.remove_folder("payments")
    rng = random.Random(21)
    delivered = {day: _payments(day, rng) for day in payment_days}
    for day, rows in delivered.items():
        _write(files, day, "batch-1.jsonl", rows)
    # Day two again, as another file (the same payments, amounts spelled "12.5"):
    # a replay, which must insert nothing.
    replay = [
        {**r, "amount": r["amount"].rstrip("0").rstrip(".")} for r in delivered[payment_days[1]]
    ]
    _write(files, payment_days[1], "batch-1.redelivered.jsonl", replay)
    days = [d.isoformat() for d in payment_days]
    print(
        f"6. Payments: {sum(map(len, delivered.values()))} payments over {len(days)} days "
        f"({days[0]} .. {days[-1]}), day two delivered twice."
    )
    tags = {"demo/stage": "payments"}
    # The days as one backfill: one run, one pass over their files, a commit per day.
    run_job(defs, "payments_job", days, resources=resources, instance=instance, tags=tags)
    # A replay that changes a payment: refused, naming the key; nothing of the day lands.
    changed = {**delivered[payment_days[2]][0], "amount": "1.00"}
    _write(files, payment_days[2], "batch-2.jsonl", [changed])
    refused = run_job(
        defs,
        "payments_job",
        [days[2]],
        resources=resources,
        instance=instance,
        tags=tags,
        raise_on_error=False,
    )
    error = next((e.step_failure_data.error for e in refused.all_events if e.is_step_failure), None)
    while error is not None and error.cause is not None:
        error = error.cause  # the payments error itself, not Dagster's wrapper
    lines = error.message.strip().splitlines()[:3] if error else []
    print(
        f"   A replay with a changed amount: run {'refused' if not refused.success else 'PASSED'}:"
    )
    for line in [line.split(": ", 1)[-1] for line in lines[:1]] + lines[1:]:
        print(textwrap.fill(line.strip(), width=96, initial_indent="   ", subsequent_indent="   "))
    files.remove(f"{day_folder(payment_days[2])}/batch-2.jsonl")
    stored = lakehouse.read_arrow(
        "payments",
        columns=["idempotency_key", "account_id", "amount", "currency", "created_at"],
        where=is_in("payment_date", payment_days),
    ).to_pylist()
    got = {tuple(r.values()) for r in stored}
    want = {_typed(r) for rows in delivered.values() for r in rows}
    same = got == want and len(stored) == len(want)
    print(
        f"   payments: {len(stored)} rows, content checksum {checksum(got)}; each payment "
        f"once, as first delivered: {'yes' if same else 'NO'}\n"
    )
    return {"payments": checksum(got) if same else "MISMATCH"}


def expected_sessions(visits: list[dict], gap: dt.timedelta) -> set[tuple]:
    """(user, start, end, visits) of every session: a user's visits in event-time order,
    a new session after more than `gap` without one."""
    by_user: dict[str, list[dt.datetime]] = {}
    for visit in visits:
        by_user.setdefault(visit["user_id"], []).append(visit["event_time"])
    sessions = set()
    for user, times in by_user.items():
        times.sort()
        start = previous = times[0]
        count = 0
        for when in times:
            if when - previous > gap:
                sessions.add((user, start, previous, count))
                start, count = when, 0
            previous, count = when, count + 1
        sessions.add((user, start, previous, count))
    return sessions


def run_sessions(dagster: Dagster, resources, visit_days: list[dt.date], since: float) -> dict:
    lakehouse = resources["lakehouse"]
    print(
        f"7. Sessions: the {AUTOMATION_SENSOR} sensor builds user_sessions after visits_daily "
        "changes (its condition: the asset's Automation tab) ..."
    )
    launched = dagster.automated("user_sessions", "visits_daily", since)
    show_automated(launched, "user_sessions")
    gap = dt.timedelta(minutes=resources["session_settings"].gap_minutes)
    visits = lakehouse.read_arrow("visits_daily", columns=["user_id", "event_time"]).to_pylist()
    want = expected_sessions(visits, gap)
    stored = lakehouse.read_arrow("user_sessions").to_pylist()
    got = {_session_row(s) for s in stored}
    same = got == want
    # Session ids hash when visits were first seen: equal across reruns of one history,
    # not across fresh deployments, so the checksum leaves them out.
    print(
        f"   user_sessions for {visit_days[0]} .. {visit_days[-1]}: {len(stored)} sessions; "
        f"equal to sessions cut from visits_daily here ({gap.seconds // 60}-minute gap): "
        f"{'yes' if same else 'NO'}; content checksum {checksum(got)}\n"
    )
    return {"user_sessions": checksum(got) if same else "MISMATCH"}


def show_automated(launched: list[Launched], asset: str) -> None:
    if not launched:
        print(f"   {asset} was up to date already: automation launched nothing.")
        return
    print(f"   Automation launched {len(launched)} run(s) of {asset}:")
    for run in launched:
        backfill = run.tags.get("dagster/backfill")
        how = f"one run of backfill {backfill}" if backfill else "a run"
        print(f"   {run.partition_key or '(unpartitioned)':<23} {how}")


def _session_row(session: dict) -> tuple:
    return (session["user_id"], session["session_start"], session["session_end"], session["visits"])


def run_snapshot(dagster: Dagster, resources, since: float) -> dict[str, str]:
    lakehouse = resources["lakehouse"]
    print("8. Snapshot: automation takes a device_snapshot after device_catalog changes ...")
    launched = dagster.automated(
        "device_snapshot", "device_catalog", since, read_version="source_version"
    )
    show_automated(launched, "device_snapshot")
    current = current_snapshot(manifest_entries(lakehouse))
    snapshot, catalog = (
        {tuple(r[c] for c in CATALOG_COLUMNS) for r in lakehouse.read_arrow(table).to_pylist()}
        for table in (current.snapshot, "device_catalog")
    )
    same = snapshot == catalog
    print(
        f"   {current.snapshot} (write-once, behind device_snapshot_manifest): "
        f"{len(snapshot)} rows, equal to device_catalog: {'yes' if same else 'NO'}; content "
        f"checksum {checksum(snapshot)}\n"
    )
    return {"device_snapshot": checksum(snapshot) if same else "MISMATCH"}


def run(
    defs: dg.Definitions,
    resources: dict,
    dagster: Dagster,
    dates: DemoDates,
    since: float,
) -> dict[str, str]:
    """Prints its part of the report; returns each table's content checksum (or
    "MISMATCH"). Payments are launched here; sessions and the snapshot are automation's
    work since `since` (the demo's start), which this part waits for."""
    return {
        **run_payments(defs, resources, dagster.instance, dates.payment_days),
        **run_sessions(dagster, resources, dates.visit_days, since),
        **run_snapshot(dagster, resources, since),
    }
