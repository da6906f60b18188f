"""`make stack`: the production profile on 127.0.0.1 in one command; `make stack-down`
stops it.

    python platform/stack.py up      # in the foreground, until Ctrl-C, SIGTERM or `down`
    python platform/stack.py down    # from another shell

`up` starts, each a real server by its pid, logging under `.data/stack/`:
- an S3-compatible object store (s3proxy, `demo/servers.py`), whose bucket `lakehouse`
  holds the tables (LAKEHOUSE_ROOT=s3://lakehouse) and whose bucket `landing` is where
  source files land (LANDING_ROOT=s3://landing);
- Postgres, with a database `dagster` for the instance (runs, event logs, schedules:
  `platform/instance.py`) and `metastore` for the SQL catalog (LAKEHOUSE_METASTORE_URL);
- a Spark standalone cluster, a master and two workers (`platform/spark_cluster.py`), with
  the long-lived Spark (Spark Connect and the JDBC server) on it, which every run attaches
  to and writes `s3://` tables through;
- the code server, `dagster-webserver` and `dagster-daemon`, each a process of its own
  under a supervisor that starts it again when it exits (`demo/processes.py`).

The variables that point a shell at it (`dagster`, `make sql`, a run by hand) are
printed and written to `.data/stack/env`; a deployment sets the same variables to its
own services (README, "Settings"). Everything is stopped on the way out, the servers
last, also when a part failed to start.
Run as a script (`platform/` is not a package: `platform` is a stdlib module name).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

import spark_cluster  # noqa: E402  (platform/, this script's folder)
from instance import POSTGRES_URL, write_instance  # noqa: E402
from pyarrow import fs as pafs  # noqa: E402

from demo.processes import supervised_platform, wait_until_serving  # noqa: E402
from demo.servers import create_databases, object_store, postgres  # noqa: E402
from resources.spark_server import (  # noqa: E402
    METASTORE_URL_ENV,
    REMOTE_ENV,
    STATE_ENV,
    free_port,
)

STATE = PROJECT_ROOT / ".data" / "stack"
ACCESS_KEY, SECRET_KEY, REGION = "stack", "stack-secret", "us-east-1"
BUCKET, LANDING_BUCKET = "lakehouse", "landing"
DATABASES = ("dagster", "metastore")


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _buckets(endpoint: str) -> None:
    store = pafs.S3FileSystem(
        access_key=ACCESS_KEY,
        secret_key=SECRET_KEY,
        region=REGION,
        endpoint_override=endpoint,
        scheme="http",
        allow_bucket_creation=True,
    )
    for bucket in (BUCKET, LANDING_BUCKET):
        if store.get_file_info(bucket).type == pafs.FileType.NotFound:
            store.create_dir(bucket)


@contextmanager
def _cluster(state: Path, env: dict[str, str]):
    """The standalone cluster, and the long-lived Spark on it (configured by `env`)."""
    os.environ.update(env)  # spark_cluster reads the deployment from the environment
    if (state / "cluster.json").exists():
        spark_cluster.down(state)  # left by a stack that was killed: its processes, by pid
    try:
        cluster = spark_cluster.up(state, worker_cores=1, worker_memory="3g")
        server = spark_cluster.connect(state)
        yield cluster, server
    finally:
        spark_cluster.down(state)


def up(state: Path) -> None:
    signal.signal(signal.SIGTERM, _interrupted)
    state.mkdir(parents=True, exist_ok=True)
    (state / "stack.pid").write_text(str(os.getpid()))
    started = time.monotonic()
    with ExitStack() as stack:
        endpoint = stack.enter_context(
            object_store(state / "s3", free_port(), ACCESS_KEY, SECRET_KEY)
        )
        _buckets(endpoint)
        server_url = stack.enter_context(postgres(state / "postgres", free_port()))
        create_databases(server_url, DATABASES)
        base = server_url.rsplit("/", 1)[0]
        host = base.split("@", 1)[1]
        env = {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
            "LAKEHOUSE_ROOT": f"s3://{BUCKET}",
            "LANDING_ROOT": f"s3://{LANDING_BUCKET}",
            POSTGRES_URL: f"{base}/dagster",
            # Postgres stores a run's events in batches (Dagster's opt-in): a 364-day range
            # run took 19 s with it against 28 s without (benchmarks/run_cost.py).
            "DAGSTER_EVENT_BATCH_SIZE": "1000",
            METASTORE_URL_ENV: f"jdbc:postgresql://{host}/metastore?user=postgres",
            "DAGSTER_HOME": str(state / "dagster"),
        }
        cluster, server = stack.enter_context(_cluster(state / "spark", env))
        env |= {REMOTE_ENV: server.remote, STATE_ENV: str(state / "spark" / "connect")}
        write_instance(Path(env["DAGSTER_HOME"]), env)
        platform = stack.enter_context(
            supervised_platform(PROJECT_ROOT, state / "dagster-processes", {**os.environ, **env})
        )
        wait_until_serving(platform)
        env["DAGSTER_WEBSERVER_URL"] = platform.url  # where `make stack-demo` hands its files
        (state / "env").write_text("".join(f"export {k}={v}\n" for k, v in env.items()))
        print(f"The production profile is up on 127.0.0.1 in {time.monotonic() - started:.0f} s:")
        print(f"  Dagster UI:     {platform.url} (webserver, daemon, code server: supervised)")
        print(
            f"  object store:   {endpoint} (s3proxy; the tables in s3://{BUCKET}, "
            f"files land in s3://{LANDING_BUCKET})"
        )
        print(f"  Postgres:       {base} (databases: {', '.join(DATABASES)})")
        print(f"  Spark cluster:  {cluster['master_url']} (UI {cluster['master_ui']})")
        print(f"  long-lived Spark: {server.remote}; SQL over JDBC: {server.jdbc}")
        print(f"  variables:      source {state / 'env'}")
        print(f"  logs:           {state}; stop with Ctrl-C or `make stack-down`")
        sys.stdout.flush()
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            print("Stopping the production profile ...")
    (state / "stack.pid").unlink(missing_ok=True)
    print("Stopped.")


def down(state: Path, timeout: float = 180) -> None:
    """SIGTERM to the running `up`, which stops what it started; waits for it."""
    pid_file = state / "stack.pid"
    if not pid_file.exists():
        print("no stack is running")
        return
    pid = int(pid_file.read_text())
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pid_file.unlink()
        print(f"no stack is running (pid {pid} is gone)")
        return
    deadline = time.monotonic() + timeout
    while pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    if pid_file.exists():
        raise SystemExit(f"the stack (pid {pid}) did not stop in {timeout:.0f} s")
    print(f"stopped the stack (pid {pid})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["up", "down"])
    parser.add_argument("--state", type=Path, default=STATE)
    args = parser.parse_args()
    up(args.state) if args.command == "up" else down(args.state)


if __name__ == "__main__":
    main()
