"""Deterministic demo visits: the same days and seed always write the same bytes."""

from __future__ import annotations

import datetime as dt
import json
import random
import shutil
from pathlib import Path

PAGES = ["/", "/search", "/products/lamp", "/products/desk", "/cart", "/checkout", "/help"]
REFERRERS = ["google", "newsletter", "direct", "partner-blog"]
DEVICES = ["mobile", "desktop", "tablet"]


def _visits(day: dt.date, part: int, count: int, rng: random.Random) -> list[dict]:
    start = dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)
    visits = []
    for i in range(count):
        when = start + dt.timedelta(seconds=rng.randrange(86_400))
        visit = {
            "visit_id": f"{day:%Y%m%d}-{part}-{i:04d}",
            "user_id": f"user-{rng.randrange(500):03d}",
            "event_time": when.isoformat(),
            "page": rng.choice(PAGES),
        }
        if rng.random() < 0.7:
            visit["context"] = {"referrer": rng.choice(REFERRERS), "device": rng.choice(DEVICES)}
        visits.append(visit)
    return sorted(visits, key=lambda v: v["event_time"])


def _write(path: Path, visits: list[dict]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(v, sort_keys=True) + "\n" for v in visits), encoding="utf-8")
    return path.as_posix()


def day_folder(landing: Path, day: dt.date) -> Path:
    return landing / "visits" / f"date={day.isoformat()}"


def write_initial_files(landing: Path, days: list[dt.date], *, seed: int = 7) -> int:
    """Two files a day, plus a duplicated delivery of three files. Returns files written."""
    shutil.rmtree(landing / "visits", ignore_errors=True)
    rng = random.Random(seed)
    written = 0
    for day in days:
        for part in (0, 1):
            _write(day_folder(landing, day) / f"part-{part}.jsonl", _visits(day, part, 90, rng))
            written += 1
    for day in (days[3], days[20], days[33]):  # the same file delivered twice
        folder = day_folder(landing, day)
        shutil.copyfile(folder / "part-1.jsonl", folder / "part-1.redelivered.jsonl")
        written += 1
    return written


def write_late_files(landing: Path, days: list[dt.date], *, seed: int = 11) -> list[str]:
    """Late arrivals for days already materialized: two new files, one file appended to,
    and one file re-notified (touched) without any change."""
    rng = random.Random(seed)
    late = [
        _write(day_folder(landing, days[8]) / "late-upload.jsonl", _visits(days[8], 7, 25, rng)),
        _write(day_folder(landing, days[31]) / "late-upload.jsonl", _visits(days[31], 7, 12, rng)),
    ]
    appended = day_folder(landing, days[29]) / "part-0.jsonl"
    with appended.open("a", encoding="utf-8") as out:
        for visit in _visits(days[29], 8, 5, rng):
            out.write(json.dumps(visit, sort_keys=True) + "\n")
    late.append(appended.as_posix())
    (day_folder(landing, days[15]) / "part-0.jsonl").touch()
    return late
