"""The platform's Dagster processes as a deployment runs them, under a supervisor: a code
server (`dagster code-server start`, the process that loads the definitions and starts
every run's process), the webserver and the daemon, each a process of its own, pointed at
the code server through a workspace file of one `grpc_server` entry. A process that exits
is started again, on the same port, within a second, as systemd or a container runtime
would; each start is counted.

`dagster dev` runs the same three, but ends them all when its webserver or daemon dies
(dagster/_cli/dev.py): a platform that outlives a killed daemon is a supervised one.
Everything is started by pid, logs to `logs/<name>.log`, and is stopped, process group
and all, on the way out.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg

from demo.dagster_dev import INSTANCE, DemoError, free_port, graphql

HOST = "127.0.0.1"
LOCATION = "lakehouse"


@dataclass
class Supervised:
    """One process the supervisor keeps running."""

    name: str
    command: list[str]
    log: Path
    process: subprocess.Popen | None = None
    starts: int = 0

    def start(self, cwd: Path, env: Mapping[str, str]) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.command,
                cwd=cwd,
                env=dict(env),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.starts += 1

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process and self.process.poll() is None else None


@dataclass
class Platform:
    """The supervised processes, and where they answer."""

    code_server: Supervised
    webserver: Supervised
    daemon: Supervised
    url: str
    workspace: Path
    stopping: threading.Event = field(default_factory=threading.Event)

    @property
    def processes(self) -> tuple[Supervised, ...]:
        return (self.code_server, self.webserver, self.daemon)


def _workspace(folder: Path, port: int) -> Path:
    path = folder / "workspace.yaml"
    path.write_text(
        "load_from:\n"
        "  - grpc_server:\n"
        f"      host: {HOST}\n"
        f"      port: {port}\n"
        f"      location_name: {LOCATION}\n"
    )
    return path


@contextmanager
def supervised_platform(
    project_root: Path, folder: Path, env: Mapping[str, str]
) -> Iterator[Platform]:
    """The code server, webserver and daemon for the instance under env's DAGSTER_HOME,
    kept running until the block ends; yields once the webserver answers."""
    logs = folder / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    code_port, web_port = free_port(), free_port()
    workspace = _workspace(folder, code_port)
    dagster = [sys.executable, "-m", "dagster"]
    platform = Platform(
        code_server=Supervised(
            "code-server",
            [*dagster, "code-server", "start", "-h", HOST, "-p", str(code_port)]
            + ["-f", "platform/definitions.py", "-d", str(project_root)]
            + ["--location-name", LOCATION],
            logs / "code-server.log",
        ),
        webserver=Supervised(
            "webserver",
            [sys.executable, "-m", "dagster_webserver", "-h", HOST, "-p", str(web_port)]
            + ["-w", str(workspace)],
            logs / "webserver.log",
        ),
        daemon=Supervised(
            "daemon",
            [str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w", str(workspace)],
            logs / "daemon.log",
        ),
        url=f"http://{HOST}:{web_port}",
        workspace=workspace,
    )
    # The instance's storage is created here first: three processes creating a new
    # SQLite schema at once race ("table jobs already exists").
    dg.DagsterInstance.from_config(env["DAGSTER_HOME"]).dispose()
    for process in platform.processes:
        process.start(project_root, env)

    def supervise() -> None:
        while not platform.stopping.wait(0.5):
            for process in platform.processes:
                if process.pid is None:
                    process.start(project_root, env)

    supervisor = threading.Thread(target=supervise, name="supervisor", daemon=True)
    supervisor.start()
    try:
        yield platform
    finally:
        platform.stopping.set()
        supervisor.join()
        # The daemon first, the code server last: a tick or a run launched while stopping
        # still finds the code server, instead of failing with it unreachable.
        for process in reversed(platform.processes):
            _stop(process)


def _stop(process: Supervised, grace: float = 30.0) -> None:
    if process.process is None:
        return
    pid = process.process.pid
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, None)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        try:
            process.process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def wait_until_serving(platform: Platform, timeout: float = 180) -> None:
    """Until the webserver answers and the daemon's heartbeats are in."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            statuses = graphql(platform.url, INSTANCE)["instance"]["daemonHealth"]
            if all(s["healthy"] for s in statuses["allDaemonStatuses"] or [{"healthy": False}]):
                return
        except (OSError, DemoError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise DemoError(f"the platform at {platform.url} is not up after {timeout:.0f} s")
        time.sleep(1)
