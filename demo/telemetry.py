"""The telemetry part of the demo: three tools' report files land shuffled, one twice, some
late, one grown by an append; the sensor launches runs of only the dirty subjects, and the
running totals come out equal to sums taken here, straight from the generated rows."""

from __future__ import annotations

import datetime as dt
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from assets.telemetry import control
from demo.dagster_dev import Dagster
from demo.landing_files import LandingFiles
from demo.report import checksum
from demo.runs import materializations
from sensors import telemetry_files

SUBJECTS = ["Tool01", "Tool02", 'Line 3 "north"']  # a folder name with a space and quotes
FILES_PER_SUBJECT, ROWS_PER_FILE = 12, 240
HEADER = b"ts,in_spec,out_of_spec,mispicks\n"


@dataclass(frozen=True)
class Report:
    subject: str
    index: int
    start: dt.datetime
    lines: tuple[bytes, ...]
    totals: tuple[int, int, int]

    @property
    def path(self) -> str:
        return f"telemetry/{self.subject}/{self.start:%Y%m%dT%H%M}.csv"


def _report(subject: str, index: int, first_hour: dt.datetime, rng: random.Random) -> Report:
    start = first_hour + dt.timedelta(hours=4 * index)
    plus_two = dt.timezone(dt.timedelta(hours=2))  # tools write local time with an offset
    lines, sums = [], [0, 0, 0]
    for second in sorted(rng.randrange(4 * 3600) for _ in range(ROWS_PER_FILE)):
        counts = (rng.randrange(50), rng.randrange(4), rng.randrange(2))
        ts = (start + dt.timedelta(seconds=second)).astimezone(plus_two).isoformat()
        lines.append(f"{ts},{counts[0]},{counts[1]},{counts[2]}\n".encode())
        sums = [a + b for a, b in zip(sums, counts, strict=True)]
    return Report(subject, index, start, tuple(lines), (sums[0], sums[1], sums[2]))


def _write(files: LandingFiles, report: Report, lines: int | None = None) -> None:
    files.write(report.path, HEADER + b"".join(report.lines[:lines]))


def land_and_settle(dagster: Dagster, write: Callable[[], None]) -> None:
    """Lands files with `write`, lets the sensor launch its runs, and reports them."""
    since = time.time()
    write()
    runs = dagster.settle([telemetry_files.name], since)
    print(f"   The sensor launched {len(runs)} run(s) (one per dirty subject):")
    for run in runs:
        meta = {
            asset: dict(materializations(dagster.instance, asset, run.run_id))[run.partition_key]
            for asset in (control.RAW, control.TOTALS)
        }
        raw, totals = meta[control.RAW], meta[control.TOTALS]
        changes = raw["changes"].value
        kinds = ", ".join(sorted(set(changes.values())))
        print(
            f"   {run.partition_key:<16} {len(changes):>2} file changes ({kinds}),"
            f" totals {totals['regime'].value}: {totals['rows_recomputed'].value} rows"
            f" recomputed, {totals['rows_replaced'].value} replaced"
        )


def run(dagster: Dagster, resources: dict, first_hour: dt.datetime) -> dict[str, str]:
    """Prints its part of the report; returns the running totals' content checksum (or
    "MISMATCH" when they differ from the sums taken here)."""
    rng = random.Random(11)
    reports = [_report(s, i, first_hour, rng) for s in SUBJECTS for i in range(FILES_PER_SUBJECT)]
    stragglers = [r for r in reports if r.index in (2, 5)]
    grown = next(r for r in reports if r.subject == "Tool01" and r.index == FILES_PER_SUBJECT - 1)
    first_wave = [r for r in reports if r not in stragglers]
    random.Random(12).shuffle(first_wave)
    files = LandingFiles(resources["landing"])
    lakehouse = resources["lakehouse"]

    print(
        f"4. Telemetry: {len(reports)} report files of {ROWS_PER_FILE} rows for {len(SUBJECTS)} "
        "tools. First wave: shuffled,"
    )
    print(f"   {len(stragglers)} held back, {grown.path} half written.")

    def first() -> None:
        for report in first_wave:
            _write(files, report, ROWS_PER_FILE // 2 if report is grown else None)

    land_and_settle(dagster, first)

    print(f"\n   Second wave: {len(stragglers)} late files (hours 8 and 20), the rest of")
    print(f"   {grown.path} appended, and {first_wave[0].path} delivered again.")

    def second() -> None:
        for report in stragglers:
            _write(files, report)
        _write(files, grown)
        _write(files, first_wave[0])  # the same bytes again: no work

    land_and_settle(dagster, second)
    print("   The sensor's next tick asked for nothing.\n")

    totals = control.running_totals(lakehouse).to_pylist()
    exact = True
    print(f"   {'subject':<16} {'rows':>5}  {'cum in/out/mispicks':>22}  expected (summed here)")
    for subject in SUBJECTS:
        rows = sorted(
            (r for r in totals if r["subject_key"] == subject),
            key=lambda r: (r["ts"], r["source"], r["line"]),
        )
        last = rows[-1]
        got = (last["cum_in_spec"], last["cum_out_of_spec"], last["cum_mispicks"])
        sums = [r.totals for r in reports if r.subject == subject]
        expected = tuple(sum(column) for column in zip(*sums, strict=True))
        count = FILES_PER_SUBJECT * ROWS_PER_FILE
        exact &= got == expected and len(rows) == count
        print(
            f"   {subject:<16} {len(rows):>5}  {'/'.join(map(str, got)):>22}  "
            f"{'/'.join(map(str, expected))} ({count} rows)"
        )
    content = [tuple(r.values()) for r in totals]
    print(
        f"   Running totals exact: {'yes' if exact else 'NO'}; {len(content)} rows, content "
        f"checksum {checksum(content)}\n"
    )
    return {control.TOTALS: checksum(content) if exact else "MISMATCH"}
