"""Deterministic demo visits: the same days and seed always write the same bytes."""

from __future__ import annotations

import datetime as dt
import json
import random

from assets.overwriting.calendar import day_folder
from demo.landing_files import LandingFiles

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


def _lines(visits: list[dict]) -> str:
    return "".join(json.dumps(v, sort_keys=True) + "\n" for v in visits)


def write_initial_files(landing: LandingFiles, days: list[dt.date], *, seed: int = 7) -> int:
    """Two files a day, plus a duplicated delivery of three files. Returns files written."""
    landing.remove_folder("visits")
    rng = random.Random(seed)
    written = 0
    for day in days:
        for part in (0, 1):
            landing.write(
                f"{day_folder(day)}/part-{part}.jsonl", _lines(_visits(day, part, 90, rng))
            )
            written += 1
    for day in (days[3], days[20], days[33]):  # the same file delivered twice
        folder = day_folder(day)
        landing.copy(f"{folder}/part-1.jsonl", f"{folder}/part-1.redelivered.jsonl")
        written += 1
    return written


def write_late_files(landing: LandingFiles, days: list[dt.date], *, seed: int = 11) -> list[str]:
    """Late arrivals for days already materialized: two new files, one file appended to,
    and one file delivered again without any change. Returns the late files' paths."""
    rng = random.Random(seed)
    late = [
        landing.write(
            f"{day_folder(days[8])}/late-upload.jsonl", _lines(_visits(days[8], 7, 25, rng))
        ),
        landing.write(
            f"{day_folder(days[31])}/late-upload.jsonl", _lines(_visits(days[31], 7, 12, rng))
        ),
    ]
    appended = f"{day_folder(days[29])}/part-0.jsonl"
    landing.append(appended, _lines(_visits(days[29], 8, 5, rng)))
    late.append(appended)
    landing.deliver_again(f"{day_folder(days[15])}/part-0.jsonl")
    return late
