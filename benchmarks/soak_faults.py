"""The soak's faults, each a SIGKILL or a full disk, on the supervised platform:

- a run's process (a run STARTED, its worker the pid it recorded);
- the long-lived Spark (its process group: the JVM and what it started);
- the code server (the `dagster code-server start` process and the server process it
  runs; the run processes it started live on, orphaned, as they would on a host);
- the daemon, and the webserver (the supervisor starts them again);
- the lakehouse's disk: a file takes all its free space for a while, then is removed.
"""

from __future__ import annotations

import errno
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import dagster as dg
import psutil

from demo.processes import Platform, Supervised
from resources.spark_server import SparkServer, alive
from sensors.dead_runs import run_worker

RUN, SPARK, CODE_SERVER, DAEMON, WEBSERVER, DISK = (
    "run process",
    "long-lived Spark",
    "code server",
    "daemon",
    "webserver",
    "disk full",
)


class Faults:
    def __init__(
        self,
        platform: Platform,
        instance: dg.DagsterInstance,
        spark_state: Path,
        disk: Path | None,
    ) -> None:
        self.platform, self.instance = platform, instance
        self.spark = SparkServer(spark_state)
        self.disk = disk
        self.done: Counter[str] = Counter()
        self._filler: Path | None = None
        self.disk_filled_until = 0.0
        """time.monotonic() when the disk is freed again."""

    def inject(self, kind: str, rng) -> str | None:
        """Injects one fault of `kind`; what it hit, or None when there was nothing to hit
        (no run started, Spark already down)."""
        hit = {
            RUN: lambda: self._kill_run(rng),
            SPARK: self._kill_spark,
            CODE_SERVER: lambda: self._kill_supervised(self.platform.code_server, server=True),
            DAEMON: lambda: self._kill_supervised(self.platform.daemon),
            WEBSERVER: lambda: self._kill_supervised(self.platform.webserver),
            DISK: self._fill_disk,
        }[kind]()
        if hit is not None:
            self.done[kind] += 1
        return hit

    def _running(self) -> list[tuple[dg.DagsterRun, int]]:
        """The started runs whose process lives, with its pid, by run id."""
        started = dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])
        living = []
        for record in self.instance.get_run_records(started):
            worker = run_worker(self.instance, record)
            if worker and worker.lives():
                living.append((record.dagster_run, worker.pid))
        return sorted(living, key=lambda running: running[0].run_id)

    def _kill_run(self, rng) -> str | None:
        living = self._running()
        if not living:
            return None
        run, pid = rng.choice(living)
        os.kill(pid, signal.SIGKILL)
        tags = run.tags
        first = tags.get("dagster/asset_partition_range_start")
        last = tags.get("dagster/asset_partition_range_end")
        span = f"{first}..{last}" if first != last else first
        return f"{run.job_name} {tags.get('dagster/partition') or span or ''} (pid {pid})"

    def _kill_spark(self) -> str | None:
        described = self.spark.description()
        if described is None or not alive(described.pid):
            return None
        os.killpg(described.pid, signal.SIGKILL)
        return f"pid {described.pid}"

    def _kill_supervised(self, process: Supervised, *, server: bool = False) -> str | None:
        """SIGKILLs `process`; with `server`, also the server process it runs (a code
        server's `dagster api grpc`), and then one run process that server started, which
        nothing but the sensor `dead_runs` can report once its code server is gone."""
        pid = process.pid
        if pid is None:
            return None
        servers = [
            child
            for child in (psutil.Process(pid).children() if server else [])
            if "grpc" in " ".join(child.cmdline())
        ]
        children = {child.pid for each in servers for child in each.children()}
        runs = [worker for _, worker in self._running() if worker in children]
        for each in [pid, *(grpc.pid for grpc in servers), *runs[:1]]:
            os.kill(each, signal.SIGKILL)
        hit = f"pid {pid}"
        if servers:
            hit += f" and its server {[grpc.pid for grpc in servers]}"
        return hit + (f", then a run process it left behind (pid {runs[0]})" if runs else "")

    def _fill_disk(self, seconds: float = 20.0) -> str | None:
        if self.disk is None:
            return None
        self._filler = self.disk / ".soak-disk-filler"
        free, chunk = 0, 64 * 2**20
        with self._filler.open("wb") as out:
            while chunk >= 2**16:  # until not even 64 KiB more fits
                try:
                    os.posix_fallocate(out.fileno(), free, chunk)
                    free += chunk
                except OSError as error:
                    if error.errno != errno.ENOSPC:
                        raise
                    chunk //= 2
        self.disk_filled_until = time.monotonic() + seconds
        threading.Timer(seconds, self.free_disk).start()
        return f"{free / 2**20:.0f} MiB taken for {seconds:.0f} s"

    def free_disk(self) -> None:
        if self._filler is not None:
            self._filler.unlink(missing_ok=True)
