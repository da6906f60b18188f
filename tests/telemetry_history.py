"""A generated telemetry history and an independent oracle for its totals (test support).

The oracle is deliberately naive (sort everything, add up in Python): it shares no code
with the platform's reconciler, so agreeing with it means something.
"""

from __future__ import annotations

import datetime as dt
import os
import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

OFFSETS = [dt.UTC, dt.timezone(dt.timedelta(hours=2)), dt.timezone(dt.timedelta(hours=-5))]
START = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)
HEADER = "ts,in_spec,out_of_spec,mispicks\n"


@dataclass(frozen=True)
class Row:
    ts: dt.datetime
    in_spec: int
    out_of_spec: int
    mispicks: int


@dataclass(frozen=True)
class ReportFile:
    subject: str
    name: str
    rows: tuple[Row, ...]

    @property
    def path(self) -> str:
        return f"telemetry/{self.subject}/{self.name}"

    @property
    def content(self) -> bytes:
        lines = [HEADER]
        for i, row in enumerate(self.rows):
            local = row.ts.astimezone(OFFSETS[i % len(OFFSETS)])
            stamp = local.isoformat().replace("+00:00", "Z")
            lines.append(f"{stamp},{row.in_spec},{row.out_of_spec},{row.mispicks}\n")
        return "".join(lines).encode()


def report(
    subject: str, start: dt.datetime, rows: int, rng: random.Random, *, hours: int = 4
) -> ReportFile:
    """A report of `rows` rows spread over `hours` hours from `start`."""
    span = hours * 3600
    seconds = sorted(rng.randrange(span) for _ in range(rows))
    return ReportFile(
        subject,
        f"{start:%Y%m%dT%H%M}.csv",
        tuple(
            Row(
                start + dt.timedelta(seconds=s),
                rng.randrange(50),
                rng.randrange(4),
                rng.randrange(2),
            )
            for s in seconds
        ),
    )


def history(
    subjects: list[str], files_per_subject: int, rows_per_file: int, seed: int = 7
) -> list[ReportFile]:
    """Consecutive 4-hour reports per subject, in event-time order."""
    rng = random.Random(seed)
    files = []
    for index in range(files_per_subject):
        for subject in subjects:
            files.append(report(subject, START + dt.timedelta(hours=4 * index), rows_per_file, rng))
    return files


def shuffled(
    files: list[ReportFile], *, seed: int = 14, out_of_order: float = 0.38
) -> list[ReportFile]:
    """About `out_of_order` of the files delivered late: most a little (stragglers), a few
    after everything else."""
    rng = random.Random(seed)
    order = list(files)
    late = rng.sample(range(len(order)), round(out_of_order * len(order)))
    keyed = []
    for position, file in enumerate(order):
        delay = 0.0
        if position in late:
            # Files of different subjects interleave: a delay of a few positions puts a
            # file behind later files of its own subject.
            delay = rng.choice([4.5, 7.5, 10.5, len(order)])
        keyed.append((position + delay, file))
    return [f for _, f in sorted(keyed, key=lambda k: k[0])]


def out_of_order_share(delivered: list[ReportFile]) -> float:
    """Share of files delivered after a later file (by event time) of their subject."""
    late, newest = 0, {}
    for f in delivered:
        start = f.rows[0].ts
        if f.subject in newest and newest[f.subject] > start:
            late += 1
        newest[f.subject] = max(start, newest.get(f.subject, start))
    return late / len(delivered)


def write(landing_root: str | Path, path: str, content: bytes) -> None:
    full = Path(landing_root) / path
    full.parent.mkdir(parents=True, exist_ok=True)
    full.write_bytes(content)
    # Landing files get fresh mtimes; make sure a same-second rewrite is still seen.
    stat = full.stat()
    os.utime(full, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))


def expected_totals(files: list[ReportFile]) -> list[tuple]:
    """(subject, ts, source, line, cum_in, cum_out, cum_mis), sorted."""
    rows = []
    for f in files:
        for i, r in enumerate(f.rows):
            rows.append((f.subject, r.ts, f.path, i + 2, r.in_spec, r.out_of_spec, r.mispicks))
    rows.sort(key=lambda r: (r[0], r[1], r[2], r[3]))
    out, sums = [], defaultdict(lambda: [0, 0, 0])
    for subject, ts, source, line, a, b, c in rows:
        s = sums[subject]
        s[0] += a
        s[1] += b
        s[2] += c
        out.append((subject, ts, source, line, s[0], s[1], s[2]))
    return sorted(out)


def expected_hourly(files: list[ReportFile]) -> list[tuple]:
    """(subject, hour, in, out, mis, rows), sorted."""
    buckets = defaultdict(lambda: [0, 0, 0, 0])
    for f in files:
        for r in f.rows:
            b = buckets[(f.subject, r.ts.replace(minute=0, second=0, microsecond=0))]
            b[0] += r.in_spec
            b[1] += r.out_of_spec
            b[2] += r.mispicks
            b[3] += 1
    return sorted((s, h, *v) for (s, h), v in buckets.items())
