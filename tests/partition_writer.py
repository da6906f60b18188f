"""A writer process for concurrency tests: overwrites its own partition of one table
`--commits` times through the lakehouse port (run as a script by the tests), with
delta-rs, or with delta-spark attached to a shared Spark (`--remote sc://...`)."""

from __future__ import annotations

import argparse
import datetime as dt
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa  # noqa: E402
import servers  # noqa: E402

from resources import Lakehouse, SparkResource  # noqa: E402
from resources.lakehouse.predicates import eq  # noqa: E402
from resources.object_store import ClientConfig, S3Config, S3Lakehouse, S3Storage  # noqa: E402


def day_rows(day: dt.date, name: str) -> pa.Table:
    return pa.table({"day": pa.array([day], pa.date32()), "name": [name]})


def race(lake: Lakehouse, endpoint: str, *, engine: str, remote: str = "") -> None:
    """Two writer processes overwrite their own day of table `t` of `lake` (on S3) twelve
    times each, concurrently; every commit must land, with its metadata, and each day
    end with its writer's last rows."""
    seed = dt.date(2024, 1, 1)
    lake.append("t", day_rows(seed, "seed"), metadata={"writer": 0}, partition_by=["day"])
    writers, commits = (2, 3), 12
    command = [sys.executable, __file__, "--root", lake.root, "--endpoint", endpoint]
    command += ["--key", servers.ACCESS_KEY, "--secret", servers.SECRET_KEY, "--engine", engine]
    command += ["--remote", remote, "--commits", str(commits)]
    processes = [
        subprocess.Popen(
            [*command, "--day", str(day)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for day in writers
    ]
    outputs = [process.communicate(timeout=900)[0] for process in processes]
    assert [p.returncode for p in processes] == [0, 0], outputs
    history = lake.history("t")
    assert [h.version for h in history] == list(range(len(writers) * commits, -1, -1))
    landed = {(h.metadata["writer"], h.metadata["commit"]) for h in history[:-1]}
    assert landed == {(day, i) for day in writers for i in range(commits)}
    rows = sorted((r["day"].day, r["name"]) for r in lake.read_arrow("t").to_pylist())
    assert rows == [(1, "seed"), (2, f"w2-{commits - 1}"), (3, f"w3-{commits - 1}")]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--day", type=int, required=True)
    parser.add_argument("--commits", type=int, required=True)
    parser.add_argument("--engine", default="delta-rs")
    parser.add_argument("--remote", default="")
    args = parser.parse_args()
    storage = S3Storage(
        s3=S3Config(
            endpoint=args.endpoint,
            access_key_id=args.key,
            secret_access_key=args.secret,
            region="us-east-1",
        ),
        client=ClientConfig(allow_http=True),
    )
    lake = S3Lakehouse(
        root=args.root, engine=args.engine, spark=SparkResource(remote=args.remote), s3=storage
    )
    day = dt.date(2024, 1, args.day)
    for i in range(args.commits):
        lake.overwrite(
            "t",
            day_rows(day, f"w{args.day}-{i}"),
            where=eq("day", day),
            metadata={"writer": args.day, "commit": i},
        )


if __name__ == "__main__":
    main()
