"""What bad input costs a range run (a backfill under a single-run policy), measured side
by side in one run, each kind on the same days:

1. visits: the range's read (`parse_visit_days`, one Spark pass for every day) of a
   quarter whose every day holds one bad line, against the same quarter clean. One pass
   names the first bad lines of each day, so the bad days are all refused after it,
   where a list capped for the whole range took a pass per ten bad lines.
   Pass: bad / clean <= 2.
2. payments: a range run of a quarter (in process, a real Dagster instance) with one bad
   line in its middle day, and one with a conflict in its middle day (a key replayed
   with another amount), each against the same quarter clean. The bad day fails by name
   and the other days are read in one pass more; the conflicting day is judged on its
   own and the days after it in one pass more. Either used to send every day of the
   range to a read of its own. Pass: one bad or conflicting day / clean <= 2.

Run: `.venv/bin/python benchmarks/bad_ranges.py [--days 91]`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dagster as dg  # noqa: E402

from assets.database.payments import PaymentsSettings, payments  # noqa: E402
from assets.overwriting.visits_source import VisitDay, parse_visit_days  # noqa: E402
from assets.partition_range import run_partitions  # noqa: E402
from resources import Lakehouse, LandingZone, SparkResource  # noqa: E402

FIRST_DAY = dt.date(2025, 1, 6)
REPEATS = 3
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
"""The bad day's failure is expected: its traceback is not printed."""


def write_lines(root: Path, source: str, day: dt.date, lines: list[str]) -> None:
    folder = root / source / f"date={day}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "part.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def visit_lines(day: dt.date, *, bad: bool) -> list[str]:
    """Three visits, and with `bad` a fourth line that lacks its user_id."""
    lines = [
        json.dumps(
            {"visit_id": f"{day}-{i}", "user_id": "u", "event_time": f"{day}T1{i}:00:00Z"}
            | {"page": "/"}
        )
        for i in range(3)
    ]
    if bad:
        lines.append(json.dumps({"visit_id": f"{day}-x", "event_time": f"{day}T12:00:00Z"}))
    return lines


def payment_lines(day: dt.date, first_day: dt.date, kind: str) -> list[str]:
    """Three payments; a "bad" day adds a line cut short, a "conflict" day replays the
    range's first payment with another amount."""
    rows = [
        {
            "idempotency_key": f"{day}-{i}",
            "account_id": f"acc-{i}",
            "amount": f"{10 + i}.50",
            "currency": "EUR",
            "created_at": f"{day}T1{i}:00:00Z",
        }
        for i in range(3)
    ]
    lines = [json.dumps(row) for row in rows]
    if kind == "bad":
        lines.append('{"idempotency_key": "cut", "amount": ')
    elif kind == "conflict":
        replay = {**rows[0], "idempotency_key": f"{first_day}-0", "amount": "99.00"}
        lines.append(json.dumps(replay))
    return lines


def visits_read(scratch: Path, spark: SparkResource, days: list[dt.date]) -> dict[str, float]:
    lake = Lakehouse(root=str(scratch / "visits-lake"), spark=spark)
    zones = {}
    for kind in ("clean", "bad"):
        for day in days:
            write_lines(
                scratch / f"visits-{kind}", "visits", day, visit_lines(day, bad=kind == "bad")
            )
        zones[kind] = LandingZone(root=str(scratch / f"visits-{kind}"))
    session = spark.session()
    timings: dict[str, list[float]] = {kind: [] for kind in zones}
    for _ in range(REPEATS):
        for kind, zone in zones.items():
            started = time.perf_counter()
            parsed = parse_visit_days(session, zone, lake, days)
            timings[kind].append(time.perf_counter() - started)
            read = sum(isinstance(day, VisitDay) for day in parsed.days.values())
            assert read == (0 if kind == "bad" else len(days)), (kind, read)
    return {kind: statistics.median(t) for kind, t in timings.items()}


def payments_range(scratch: Path, spark: SparkResource, days: list[dt.date]) -> dict[str, float]:
    middle = days[len(days) // 2]
    timings: dict[str, list[float]] = {"clean": [], "bad": [], "conflict": []}
    _, tags = run_partitions(days[0].isoformat(), days[-1].isoformat())
    for repeat in range(REPEATS):
        for kind in timings:
            root = scratch / f"payments-{kind}-{repeat}"
            for day in days:
                write_lines(
                    root / "landing",
                    "payments",
                    day,
                    payment_lines(day, days[0], kind if day == middle else "clean"),
                )
            resources = {
                "spark": spark,
                "lakehouse": Lakehouse(root=str(root / "lake"), spark=spark),
                "landing": LandingZone(root=str(root / "landing")),
                "payments_settings": PaymentsSettings(),
            }
            (root / "home").mkdir()
            with dg.DagsterInstance.local_temp(str(root / "home")) as instance:
                started = time.perf_counter()
                result = dg.materialize(
                    [payments],
                    resources=resources,
                    instance=instance,
                    tags=tags,
                    raise_on_error=False,
                    run_config=QUIET,
                )
                timings[kind].append(time.perf_counter() - started)
                landed = instance.get_materialized_partitions(dg.AssetKey("payments"))
            assert result.success == (kind == "clean"), kind
            assert len(landed) == len(days) - (kind != "clean"), (kind, len(landed))
    return {kind: statistics.median(t) for kind, t in timings.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=91)
    days_count = parser.parse_args().days
    days = [FIRST_DAY + dt.timedelta(days=i) for i in range(days_count)]
    spark = SparkResource(master="local[2]", shuffle_partitions=2)
    with tempfile.TemporaryDirectory(prefix="bench-bad-ranges-") as tmp:
        scratch = Path(tmp)
        print(f"visits, the read of {days_count} days, median of {REPEATS}:")
        visits = visits_read(scratch, spark, days)
        print(f"  clean:                  {visits['clean']:6.2f} s")
        print(f"  a bad line every day:   {visits['bad']:6.2f} s", flush=True)
        print(f"payments, a range run of {days_count} days, median of {REPEATS}:")
        paid = payments_range(scratch, spark, days)
        print(f"  clean:                  {paid['clean']:6.2f} s")
        print(f"  one day with a bad line: {paid['bad']:5.2f} s")
        print(f"  one day with a conflict: {paid['conflict']:5.2f} s", flush=True)
    ratios = [
        ("visits read, every day bad / clean", visits["bad"] / visits["clean"]),
        ("payments range, one bad day / clean", paid["bad"] / paid["clean"]),
        ("payments range, one conflicting day / clean", paid["conflict"] / paid["clean"]),
    ]
    print("\nRatios:")
    for text, ratio in ratios:
        print(f"  {text + f' = {ratio:.2f}':<56} {'<= 2':>6}  {'PASS' if ratio <= 2 else 'FAIL'}")
    return 0 if all(ratio <= 2 for _, ratio in ratios) else 1


if __name__ == "__main__":
    sys.exit(main())
