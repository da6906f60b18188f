"""The soak's load: three sources landing files the way the field delivers them, and what
plain Python computes from the files landed, to compare every table with.

- Visits: files for fourteen days of weeks that are over, in random order, some
  delivered twice under another name, some appended to days after they landed.
- Telemetry: report files of three tools, in shuffled order (so mostly late), some
  written half first and completed later, some delivered again unchanged.
- Event batches: versions of 200 events years apart, deletions among them (tombstones),
  stale versions landing after newer ones, some batches delivered twice.

Each `land` writes one file (or one change to a file), says what it did and leaves in
`touched` the (asset, partition) whose data the file changed (None: nothing changed);
`expected` is the content each table must end with, computed here from the generated
rows alone.
"""

from __future__ import annotations

import datetime as dt
import random
from collections import defaultdict
from pathlib import PurePosixPath

from assets.overwriting.calendar import day_folder
from assets.overwriting.data_overwrite import VISITS_DAILY
from assets.overwriting.exposition import manifest_entries, weeks_by_table
from assets.telemetry import control
from assets.warehouse.events_source import batch_file
from assets.warehouse.staging_merge import USER_EVENTS
from demo.generate import _lines, _visits
from demo.landing_files import LandingFiles
from demo.telemetry import HEADER, SUBJECTS, _report
from demo.warehouse import _event, expected_events
from resources import Lakehouse
from resources.lakehouse.predicates import is_in

Rows = set[tuple]
Touched = tuple[str, str] | None
TOTALS = "telemetry_running_totals"


class Visits:
    """Files of `visits/date=D/`; a visit is kept once per day (the first copy)."""

    def __init__(self, landing: LandingFiles, first_day: dt.date, rng: random.Random) -> None:
        self.landing, self.rng = landing, rng
        self.touched: Touched = None
        self.days = [first_day + dt.timedelta(days=i) for i in range(14)]
        self.files: dict[PurePosixPath, list[dict]] = {}
        self.parts = 0

    def land(self) -> str:
        self.parts += 1
        roll = self.rng.random()
        if self.files and roll < 0.15:
            original = self.rng.choice(sorted(self.files))
            copy = original.with_name(f"{original.stem}.redelivered-{self.parts}.jsonl")
            self.landing.copy(str(original), str(copy))
            self.files[copy] = list(self.files[original])
            self.touched = (VISITS_DAILY, original.parent.name.removeprefix("date="))
            return "visits: a file delivered twice"
        if self.files and roll < 0.3:
            path = self.rng.choice(sorted(self.files))
            day = dt.date.fromisoformat(path.parent.name.removeprefix("date="))
            more = _visits(day, self.parts, 5, self.rng)
            self.landing.append(str(path), _lines(more))
            self.files[path] += more
            self.touched = (VISITS_DAILY, day.isoformat())
            return "visits: a file appended to"
        day = self.rng.choice(self.days)
        visits = _visits(day, self.parts, 40, self.rng)
        path = PurePosixPath(day_folder(day), f"part-{self.parts}.jsonl")
        self.landing.write(str(path), _lines(visits))
        self.files[path] = visits
        self.touched = (VISITS_DAILY, day.isoformat())
        return "visits: a new file"

    def expected(self) -> Rows:
        kept: dict[tuple[str, str], tuple] = {}
        for path in sorted(self.files):
            for v in self.files[path]:
                when = dt.datetime.fromisoformat(v["event_time"])
                kept.setdefault((path.parent.name, v["visit_id"]), _visit(v, when))
        return set(kept.values())

    @staticmethod
    def daily(lakehouse: Lakehouse) -> list[tuple]:
        return _visit_rows(lakehouse.read_arrow(VISITS_DAILY, columns=VISIT_FIELDS))

    @staticmethod
    def weekly(lakehouse: Lakehouse) -> list[tuple]:
        """The weekly exposition: each week from the one table the manifest names."""
        rows: list[tuple] = []
        for table, weeks in weeks_by_table(manifest_entries(lakehouse)).items():
            where = is_in("week_start", weeks)
            rows += _visit_rows(lakehouse.read_arrow(table, where=where, columns=VISIT_FIELDS))
        return rows


VISIT_FIELDS = ["visit_id", "user_id", "event_time", "page"]


def _visit(v: dict, when: dt.datetime) -> tuple:
    return (v["visit_id"], v["user_id"], when.astimezone(dt.UTC), v["page"])


def _visit_rows(table) -> list[tuple]:
    return [_visit(r, r["event_time"]) for r in table.to_pylist()]


class Telemetry:
    """Report files of `telemetry/<subject>/`; the totals run over every row landed."""

    REPORTS_PER_SUBJECT = 30
    """Four hours each: 120 hours, within the lateness horizon (7 days), however they are
    shuffled."""

    def __init__(
        self,
        landing: LandingFiles,
        first_hour: dt.datetime,
        rng: random.Random,
        subjects: int = 3,
    ) -> None:
        """`subjects`: the demo's three tools, and more (Tool04, ...) beyond three."""
        self.landing, self.rng = landing, rng
        self.touched: Touched = None
        names = SUBJECTS + [f"Tool{n:02d}" for n in range(len(SUBJECTS) + 1, subjects + 1)]
        reports = [
            _report(s, i, first_hour, rng) for s in names for i in range(self.REPORTS_PER_SUBJECT)
        ]
        rng.shuffle(reports)
        self.pending = reports
        self.written: dict[str, tuple[bytes, ...]] = {}
        self.halves: list = []

    def _write(self, report, lines: int | None = None) -> None:
        """The report, or its first `lines` lines and part of the next (no newline yet:
        a writer caught mid-line)."""
        torn = b"" if lines is None else report.lines[lines][:12]
        self.landing.write(report.path, HEADER + b"".join(report.lines[:lines]) + torn)
        self.written[report.path] = report.lines[:lines]

    def land(self) -> str:
        roll = self.rng.random()
        self.touched = None
        if self.halves and roll < 0.25:
            report = self.halves.pop(0)
            self._write(report)
            self.touched = (TOTALS, report.subject)
            return "telemetry: a half-written file completed"
        if self.written and roll < 0.4:
            self.landing.deliver_again(self.rng.choice(sorted(self.written)))
            return "telemetry: a file delivered again, unchanged"
        if not self.pending:
            return "telemetry: nothing left to land"
        report = self.pending.pop()
        if self.rng.random() < 0.2:
            self._write(report, len(report.lines) // 2)
            self.halves.append(report)
            self.touched = (TOTALS, report.subject)
            return "telemetry: a file written half"
        self._write(report)
        self.touched = (TOTALS, report.subject)
        return "telemetry: a late or shuffled file"

    def _rows(self) -> dict[str, list[tuple]]:
        """Each subject's rows: (ts in UTC, line, in_spec, out_of_spec, mispicks)."""
        rows: dict[str, list[tuple]] = defaultdict(list)
        for path, lines in self.written.items():
            subject = path.split("/")[1]
            for number, line in enumerate(lines, start=2):
                ts, *counts = line.decode().strip().split(",")
                when = dt.datetime.fromisoformat(ts).astimezone(dt.UTC)
                rows[subject].append((when, number, *map(int, counts)))
        return rows

    def expected_totals(self) -> list[tuple]:
        """(subject, ts, cumulative counts): the running sums in (ts, line) order (one
        subject's files cover hours of their own, so no two files share an instant)."""
        out = []
        for subject, rows in self._rows().items():
            sums = [0, 0, 0]
            for when, _, *counts in sorted(rows):
                sums = [a + b for a, b in zip(sums, counts, strict=True)]
                out.append((subject, when, *sums))
        return sorted(out)

    def expected_hourly(self) -> Rows:
        hours: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
        for subject, rows in self._rows().items():
            for when, _, *counts in rows:
                sums = hours[(subject, when.replace(minute=0, second=0, microsecond=0))]
                for i, count in enumerate([*counts, 1]):
                    sums[i] += count
        return {(*key, *sums) for key, sums in hours.items()}

    @staticmethod
    def totals(lakehouse: Lakehouse) -> list[tuple]:
        return [
            (
                r["subject_key"],
                r["ts"],
                r["cum_in_spec"],
                r["cum_out_of_spec"],
                r["cum_mispicks"],
            )
            for r in control.running_totals(lakehouse).to_pylist()
        ]

    @staticmethod
    def hourly(lakehouse: Lakehouse) -> list[tuple]:
        columns = ["subject_key", "hour", "in_spec", "out_of_spec", "mispicks", "rows"]
        return [
            tuple(r.values())
            for r in lakehouse.read_arrow(control.HOURLY, columns=columns).to_pylist()
        ]


class EventBatches:
    """Batches of `events/`; user_events keeps each event's newest version."""

    EVENTS = 200

    def __init__(self, landing: LandingFiles, rng: random.Random) -> None:
        self.landing, self.rng = landing, rng
        self.touched: Touched = None
        self.batches: dict[str, list[dict]] = {}
        self.used: set[tuple[str, dt.datetime]] = set()

    def _version(self, event_id: str) -> dict:
        while True:  # versions years apart, never two at one instant
            when = dt.datetime(2019, 1, 1, tzinfo=dt.UTC) + dt.timedelta(
                seconds=self.rng.randrange(7 * 365 * 86_400)
            )
            if (event_id, when) not in self.used:
                self.used.add((event_id, when))
                break
        ingested = dt.datetime(2026, 7, 1, tzinfo=dt.UTC)
        if self.rng.random() < 0.15:
            return _event(event_id, when, ingested, op="delete", payload={})
        return _event(event_id, when, ingested, payload={"page": f"/v/{when:%Y}"})

    def land(self) -> str:
        number = len(self.batches) + 1
        if self.batches and self.rng.random() < 0.15:
            original = self.rng.choice(sorted(self.batches))
            batch_id = f"batch-{number:04d}-again"
            self._write(batch_id, self.batches[original])
            return "events: a batch delivered twice under another name"
        ids = self.rng.sample([f"e{i:03d}" for i in range(self.EVENTS)], 30)
        self._write(f"batch-{number:04d}", [self._version(i) for i in ids])
        return "events: a batch of versions years apart, with deletions"

    def _write(self, batch_id: str, rows: list[dict]) -> None:
        self.landing.write(batch_file(batch_id), _lines(rows))
        self.batches[batch_id] = rows
        self.touched = (USER_EVENTS, batch_id)

    def expected(self) -> Rows:
        return expected_events(self.batches)

    @staticmethod
    def stored(lakehouse: Lakehouse) -> list[tuple]:
        columns = ["event_id", "user_id", "event_timestamp", "is_deleted"]
        return [
            tuple(r.values())
            for r in lakehouse.read_arrow(USER_EVENTS, columns=columns).to_pylist()
        ]
