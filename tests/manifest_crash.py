"""A shredder-and-loader process for the load manifest's crash tests (run as a script by
the tests): it shreds and loads run directories as `enriched_run_job` does and SIGKILLs its
own process group (its JVM with it) once the named step is durable."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from assets.warehouse.manifest.loader import DEFAULT_EVENT_TABLES, load  # noqa: E402
from assets.warehouse.manifest.shredder import shred  # noqa: E402
from resources import Lakehouse, LandingZone, SparkResource  # noqa: E402

META = {"test": "manifest_crash"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--landing", required=True)
    parser.add_argument("--engine", required=True)
    parser.add_argument("--jars", default="")
    parser.add_argument("--kill-at", required=True)
    parser.add_argument("run_ids", nargs="+")
    args = parser.parse_args()
    spark = SparkResource(master="local[1]", shuffle_partitions=1, delta_jars=args.jars)
    lake = Lakehouse(root=args.root, engine=args.engine, spark=spark)
    landing = LandingZone(root=args.landing)

    def step(name: str) -> None:
        if name == args.kill_at:
            os.killpg(os.getpgrp(), signal.SIGKILL)

    shred(spark.session(), lake, landing, args.run_ids, by="crashed", metadata=META, on_step=step)
    load(
        spark.session(),
        lake,
        args.run_ids,
        DEFAULT_EVENT_TABLES,
        by="crashed",
        metadata=META,
        on_step=step,
    )
    print("finished without reaching", args.kill_at, flush=True)


if __name__ == "__main__":
    main()
