"""A run process for the SIGKILL trials (run as a script by `test_sigkill.py`): it boots
what a run boots (Spark included, for the Spark paths), says `ready`, reads the partition
to materialize from its standard input, materializes it, and says `done`. Booting before
it is told what to run lets the trials boot the next run while they check the last."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dagster as dg  # noqa: E402
from faults.paths import PATHS  # noqa: E402

from resources import Lakehouse, LandingZone, SparkResource  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--path", required=True, choices=sorted(PATHS))
    parser.add_argument("--lakehouse", required=True)
    parser.add_argument("--landing", required=True)
    args = parser.parse_args()
    path = PATHS[args.path]
    spark = SparkResource(master="local[1]", shuffle_partitions=1)
    if path.spark:
        spark.session()
    resources = path.resources(
        spark, Lakehouse(root=args.lakehouse, spark=spark), LandingZone(root=args.landing)
    )
    with dg.instance_for_test() as instance:
        print("ready", flush=True)
        partition = sys.stdin.readline().strip()
        path.materialize(resources, partition, instance)
    print("done", flush=True)


if __name__ == "__main__":
    main()
