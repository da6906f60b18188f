"""What one small delta-rs commit costs as a table's history grows, side by side in one run:
an append of 3 rows at versions 10, 100 and 1,000, through the lakehouse port (expired
log files cleaned only by a commit that writes a checkpoint) and through delta-rs's
defaults (cleaned after every commit, which lists and stats the whole `_delta_log`).
Each figure is the mean of 20 appends. Bound: the port's append at version 1,000 at most
3 times its append at version 10.

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
    return 0 if growth <= BOUND else 1


if __name__ == "__main__":
    sys.exit(main())
