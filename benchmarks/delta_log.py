"""What one small delta-rs commit costs as a table's history grows, side by side in one run:
an append of 3 rows at versions 10, 100 and 1,000, through the lakehouse port (expired
log files cleaned only by a commit that writes a checkpoint) and through delta-rs's
defaults (cleaned after every commit, which lists and stats the whole `_delta_log`).
Each figure is the mean of 20 appends. Bound: the port's append at version 1,000 at most
3 times its append at version 10.

Then the reads of a run that pins the version it found (`user_sessions` counts each day
of its range at it): a count of one day from the log, for each day of a 364-day table,
at the latest version, at the version pinned, and at the version before it (a commit
came in after the pin), through the port.

Run: `.venv/bin/python benchmarks/delta_log.py` (or `make bench`).
"""

import datetime as dt
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa  # noqa: E402
from deltalake import DeltaTable, write_deltalake  # noqa: E402

from resources import Lakehouse, SparkResource  # noqa: E402
from resources.lakehouse.predicates import eq  # noqa: E402

VERSIONS = (10, 100, 1_000)
APPENDS = 20
BOUND = 3.0
META = {"benchmark": "delta_log"}


def rows(day: int) -> pa.Table:
    return pa.table(
        {
            "day": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=day)] * 3, pa.date32()),
            "n": pa.array([1, 2, 3], pa.int64()),
        }
    )


def costs(through_port: bool) -> dict[int, float]:
    """Mean seconds of an append at each of VERSIONS."""
    with tempfile.TemporaryDirectory() as root:
        lake = Lakehouse(root=root, spark=SparkResource())
        uri = lake.uri("t")
        lake.append("t", rows(0), metadata=META, partition_by=["day"])
        table = DeltaTable(uri)

        def append(day: int) -> None:
            if through_port:
                lake.append("t", rows(day), metadata=META)
            else:
                write_deltalake(table, rows(day), mode="append")

        seconds = {}
        for version in VERSIONS:
            while (lake.version("t") or 0) < version:
                append(lake.version("t") or 0)
            started = time.perf_counter()
            for day in range(APPENDS):
                append(day)
            seconds[version] = (time.perf_counter() - started) / APPENDS
        return seconds


DAYS = 364


def pinned_counts() -> dict[str, float]:
    """Mean seconds of a day's count at the latest version and at pinned ones."""
    with tempfile.TemporaryDirectory() as root:
        lake = Lakehouse(root=root, spark=SparkResource())
        for day in range(DAYS):
            lake.append("t", rows(day), metadata=META, partition_by=["day"])
        latest = lake.version("t")
        assert latest is not None
        seconds = {}
        for label, version in (
            ("latest", None),
            ("pinned", latest),
            ("pinned before a commit", latest - 1),
        ):
            days = [dt.date(2024, 1, 1) + dt.timedelta(days=day) for day in range(DAYS)]
            started = time.perf_counter()
            counted = sum(lake.count("t", where=eq("day", day), version=version) for day in days)
            seconds[label] = (time.perf_counter() - started) / DAYS
            assert counted == 3 * DAYS - 3 * (version == latest - 1)
        return seconds


def main() -> int:
    port, default = costs(through_port=True), costs(through_port=False)
    print(f"An append of 3 rows to a table with history (mean of {APPENDS}):")
    for version in VERSIONS:
        print(
            f"  at version {version:>5,}: port {port[version] * 1000:6.1f} ms, "
            f"delta-rs defaults {default[version] * 1000:6.1f} ms"
        )
    growth = port[VERSIONS[-1]] / port[VERSIONS[0]]
    default_growth = default[VERSIONS[-1]] / default[VERSIONS[0]]
    verdict = "PASS" if growth <= BOUND else "FAIL"
    print(
        f"  version {VERSIONS[-1]:,} / version {VERSIONS[0]}: port {growth:.2f} (bound {BOUND}) "
        f"{verdict}; delta-rs defaults {default_growth:.2f}"
    )
    counts = pinned_counts()
    print(f"A count of one day from the log, each day of a {DAYS}-day table in turn:")
    print("  " + ", ".join(f"{label} {mean * 1000:.2f} ms" for label, mean in counts.items()))
    return 0 if growth <= BOUND else 1


if __name__ == "__main__":
    sys.exit(main())
