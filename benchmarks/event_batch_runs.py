"""What an event batch costs in a run of several against a run of one, side by side in one
run.

The event sensor asks for every batch new to a tick in one run of `event_batch_job`.
`user_events_staging` reads and parses the run's batches in one Spark pass, deduplicates
them in one Spark job and stages each in a commit of its own; `user_events` publishes
each in a MERGE of its own, reading it back from the staging table: a run of `--batches`
small batches (30 events each, as the soak lands them) should cost far less than as many
runs of one batch. Each round stages and publishes a run of one batch, then a run of
`--batches` new batches (`dg.materialize` of both assets over the range, their code as a
run executes it, on one Spark session kept warm); the figures are medians of the rounds
after the first (Spark's warm-up). The ratio printed is the cost per batch in the run of
several over the cost of a run of one.

Run: `.venv/bin/python benchmarks/event_batch_runs.py [--batches 10] [--rounds 4]` (a
minute), on the embedded default (a Spark of its own in this process: SPARK_REMOTE is
ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

import dagster as dg  # noqa: E402

from assets.warehouse import event_batches, user_events, user_events_staging  # noqa: E402
from assets.warehouse.events_source import batch_file  # noqa: E402
from demo.__main__ import load_definitions  # noqa: E402

EVENTS_PER_BATCH = 30


def land(landing: Path, batch_id: str) -> None:
    events = [
        {
            "event_id": f"{batch_id}-{n}",
            "event_timestamp": "2024-05-01T10:00:00+00:00",
            "ingestion_time": "2024-05-02T00:00:00+00:00",
            "user_id": f"u{n % 7}",
            "payload": {"n": n},
        }
        for n in range(EVENTS_PER_BATCH)
    ]
    path = landing / batch_file(batch_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(event) + "\n" for event in events), encoding="utf-8")


def run_of(resources, instance, landing: Path, batch_ids: list[str]) -> float:
    """Seconds to stage and publish `batch_ids` in one run."""
    for batch_id in batch_ids:
        land(landing, batch_id)
    instance.add_dynamic_partitions(event_batches.name, batch_ids)
    started = time.perf_counter()
    result = dg.materialize(
        [user_events_staging, user_events],
        resources=resources,
        instance=instance,
        tags={
            "dagster/asset_partition_range_start": batch_ids[0],
            "dagster/asset_partition_range_end": batch_ids[-1],
        },
    )
    seconds = time.perf_counter() - started
    assert result.success
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="event-batch-runs-"))
    for variable in ("SPARK_REMOTE", "SPARK_SERVER_STATE"):
        os.environ.pop(variable, None)
    os.environ.update(LAKEHOUSE_ROOT=str(work / "lakehouse"), LANDING_ROOT=str(work / "landing"))
    one, several = [], []
    with (
        dg.build_resources(load_definitions().resources) as built,
        dg.DagsterInstance.ephemeral() as instance,
    ):
        resources = built._asdict()
        for round_no in range(args.rounds + 1):
            alone = run_of(resources, instance, work / "landing", [f"r{round_no}-alone"])
            batch_ids = [f"r{round_no}-b{n:03d}" for n in range(args.batches)]
            together = run_of(resources, instance, work / "landing", batch_ids)
            print(f"round {round_no}: one batch {alone:.2f} s, {args.batches} {together:.2f} s")
            if round_no:
                one.append(alone)
                several.append(together)
    alone, together = statistics.median(one), statistics.median(several)
    print(
        f"Staging and publishing, median of {args.rounds}: a run of one batch {alone:.2f} s; "
        f"a run of {args.batches} batches {together:.2f} s, "
        f"{together / args.batches:.2f} s a batch ({together / args.batches / alone:.2f} of a "
        "run of one)"
    )
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
