"""A Spark standalone cluster on this machine, from pyspark's own distribution.

    python platform/spark_cluster.py up        # master + two workers on 127.0.0.1
    python platform/spark_cluster.py connect   # a long-lived Spark behind Spark Connect
    python platform/spark_cluster.py down      # stop what was started, by pid

`up` prints the `spark://` URL to give SPARK_MASTER and the master's web UI; `connect`
prints the `sc://` URL to give SPARK_REMOTE (its Spark runs on the cluster when one is
up, else `local[*]`, with Delta loaded). The processes are Spark's own (`spark-class
...deploy.master.Master` / `...Worker`, SparkSubmit of `SparkConnectServer`), started
detached in their own process groups; pids, ports and logs are kept under the state
directory (default `.data/spark`), so `down` stops exactly them.
Run as a script (`platform/` is not a package: `platform` is a stdlib module name).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.request
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

from resources.spark_server import (  # noqa: E402
    HOST,
    ServerDescription,
    SparkServer,
    free_port,
    server_config,
    start_daemon,
    stop_processes,
)

WORKERS = 2


def _daemon(state: Path, name: str, args: list[str], **settings: str) -> int:
    env = {
        **settings,
        "SPARK_LOG_DIR": str(state / "logs"),
        "SPARK_WORKER_DIR": str(state / "work"),
    }
    return start_daemon(state / "logs" / f"{name}.log", args, env)


def _master_status(ui_port: int) -> dict | None:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{ui_port}/json/", timeout=2) as response:
            return json.load(response)
    except OSError:
        return None


def up(state: Path, *, worker_cores: int, worker_memory: str, timeout: float = 120) -> dict:
    """Start a master and the workers; returns the cluster's description."""
    described = state / "cluster.json"
    if described.exists():
        raise SystemExit(f"a cluster is already described in {described}: run `down` first")
    for folder in ("logs", "work"):
        (state / folder).mkdir(parents=True, exist_ok=True)
    port, ui_port = free_port(), free_port()
    url = f"spark://{HOST}:{port}"
    pids = [
        _daemon(
            state,
            "master",
            ["org.apache.spark.deploy.master.Master", "--host", HOST, "--port", str(port)]
            + ["--webui-port", str(ui_port)],
            # An application (a run's Spark) takes one core unless it asks for more
            # (SPARK_CORES_MAX). With Spark's default the first takes every core and holds
            # it to its end, so runs launched side by side would wait for each other.
            SPARK_MASTER_OPTS="-Dspark.deploy.defaultCores=1",
        )
    ]
    for i in range(WORKERS):
        pids.append(
            _daemon(
                state,
                f"worker-{i + 1}",
                ["org.apache.spark.deploy.worker.Worker", "--host", HOST]
                + ["--cores", str(worker_cores), "--memory", worker_memory]
                + ["--webui-port", str(free_port()), url],
            )
        )
    cluster = {"master_url": url, "master_ui": f"http://{HOST}:{ui_port}", "pids": pids}
    described.write_text(json.dumps(cluster, indent=2))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = _master_status(ui_port)
        if status and status.get("aliveworkers", 0) >= WORKERS:
            return cluster
        time.sleep(0.5)
    down(state)
    raise SystemExit(f"the cluster did not come up in {timeout:.0f} s; logs in {state / 'logs'}")


def connect(state: Path) -> ServerDescription:
    """The long-lived Spark (Spark Connect) that run processes attach to, kept until
    `down`: on the cluster when one is up, else `local[*]`; reused when already up."""
    cluster = state / "cluster.json"
    master = json.loads(cluster.read_text())["master_url"] if cluster.exists() else "local[*]"
    server, _ = SparkServer(state / "connect").ensure(
        master=master, config=server_config(os.environ, master), owner=0
    )
    return server


def down(state: Path) -> list[int]:
    """Stop the processes `up` and `connect` started (by pid, process group and all);
    returns them."""
    server = SparkServer(state / "connect").stop()
    stopped = [server.pid] if server else []
    described = state / "cluster.json"
    if described.exists():
        stopped += stop_processes(json.loads(described.read_text())["pids"])
        described.unlink()
    return stopped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["up", "connect", "down"])
    parser.add_argument("--state", type=Path, default=PROJECT_ROOT / ".data" / "spark")
    parser.add_argument("--worker-cores", type=int, default=1)
    parser.add_argument("--worker-memory", default="3g")
    args = parser.parse_args()
    if args.command == "up":
        cluster = up(args.state, worker_cores=args.worker_cores, worker_memory=args.worker_memory)
        print(f"Spark standalone cluster: master and {WORKERS} workers on {HOST}")
        print(f"  export SPARK_MASTER={cluster['master_url']}")
        print(f"  export SPARK_MASTER_UI={cluster['master_ui']}   # the master's web UI")
        print("  stop it with `make cluster-down`")
    elif args.command == "connect":
        server = connect(args.state)
        print(f"Spark Connect server (Spark on {server.master}) on {HOST}, log {server.log}")
        print(f"  export SPARK_REMOTE={server.remote}")
        print(f"  export SPARK_SERVER_STATE={args.state / 'connect'}  # runs revive it")
        print(f"  SQL over JDBC: {server.jdbc}")
        print("  stop it with `make cluster-down`")
    else:
        stopped = down(args.state)
        print(f"stopped {len(stopped)} Spark processes" if stopped else "no cluster was running")


if __name__ == "__main__":
    main()
