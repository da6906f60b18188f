"""A writer process for concurrency tests: overwrites its own partition of one table
`--commits` times through the lakehouse port (run as a script by the tests)."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

import pyarrow as pa
from dagster_deltalake import S3Config
from dagster_deltalake.config import ClientConfig

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from resources import Lakehouse, SparkResource  # noqa: E402
from resources.lakehouse.predicates import eq  # noqa: E402
from resources.object_store import S3Storage  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--day", type=int, required=True)
    parser.add_argument("--commits", type=int, required=True)
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
    lake = Lakehouse(root=args.root, engine="delta-rs", spark=SparkResource(), s3=storage)
    day = dt.date(2024, 1, args.day)
    for i in range(args.commits):
        lake.overwrite(
            "t",
            pa.table({"day": pa.array([day], pa.date32()), "name": [f"w{args.day}-{i}"]}),
            where=eq("day", day),
            metadata={"writer": args.day, "commit": i},
        )


if __name__ == "__main__":
    main()
