"""The long-lived Spark: one Spark on 127.0.0.1 that every run attaches to (Spark Connect)
and every SQL client queries by table name (JDBC).

Booting a JVM costs a run 5 to 8 s on these machines, plus its share of 2 cores; a run
attached to a warm Spark pays a gRPC handshake instead. `make dev` and `make demo` start
one server from pyspark's own distribution and give its `sc://` URL to every run through
SPARK_REMOTE, with SPARK_SERVER_STATE naming the folder that describes it. The server is
Spark's Thrift server (HiveServer2's protocol, `jdbc:hive2://127.0.0.1:10000`) with the
Spark Connect plugin: one JVM, one SparkContext, one Hive metastore (embedded Derby in the
state folder's `catalog/`, or LAKEHOUSE_METASTORE_URL), so a table a run registers through
Connect is the table beeline or any JDBC tool reads by name (`resources/catalog.py`).
Embedded Derby admits one process, and this server is the only one that opens it. Delta
comes from set-up's jar cache, on the driver's class path too: the Thrift server's
sessions resolve Delta's catalog from there.

That folder (`server.json`: URL, port, pid, log, who started it) is what makes the server
manageable by anyone who finds it there:
- `ensure()` reuses a server that answers, and starts one (on the port it had, so the URL
  the runs were given stays right) when there is none or it died;
- a run whose server died calls `ensure()` too: it logs one line and starts a new one,
  instead of failing with a gRPC traceback;
- `stop()` ends it by its pid, process group and all.
A file lock makes the check-and-start one step, so runs finding the server dead at once
start one server between them; a lock of the machine's makes choosing a free port and
binding it one step, so servers of two folders started at once never pick the same port.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

HOST = "127.0.0.1"
CLIENT_ONLY = ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE")
"""Variables that make pyspark and spark-submit act as a Spark Connect client: never
handed to a server being started."""
DEFAULT_PORT = 15002
"""Spark Connect's own default port: taken when free, else any free one."""
DEFAULT_JDBC_PORT = 10000
"""HiveServer2's default port: taken when free, else any free one."""
THRIFT_SERVER = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"
CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
METASTORE_URL_ENV = "LAKEHOUSE_METASTORE_URL"
PREPARE_CATALOG = (
    "import sys; from resources.catalog import Catalog; Catalog(*sys.argv[1:]).prepare(); "
    "from resources.spark_warmup import warm_up; warm_up(sys.argv[2])"
)
START_TIMEOUT = 180.0
REMOTE_ENV = "SPARK_REMOTE"
STATE_ENV = "SPARK_SERVER_STATE"


PORTS_LOCK = Path(tempfile.gettempdir()) / f"idempotent-lakehouse-spark-ports-{os.getuid()}.lock"
"""Held by whoever is choosing a port and starting a server on it, on this machine (one
file per user: another user's would not be ours to open)."""


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class SparkServerError(RuntimeError):
    """The long-lived Spark could not be reached or started."""


@dataclass(frozen=True)
class ServerDescription:
    remote: str
    port: int
    pid: int
    master: str
    log: str
    owner: int
    """Pid of the process that started the server first (`make dev`, the demo): the one
    that stops it on its way out. 0: kept until `make cluster-down` (`make spark-connect`)."""
    jdbc_port: int = 0
    """Its Thrift (JDBC) port; 0 for a server described before it served SQL."""
    catalog: str = ""
    """The folder of its catalog: the embedded metastore and what is registered in it."""

    @property
    def jdbc(self) -> str:
        """The JDBC URL of the catalog's `lakehouse` schema, for beeline and JDBC tools."""
        return f"jdbc:hive2://{HOST}:{self.jdbc_port}/lakehouse" if self.jdbc_port else ""

    @property
    def orphaned(self) -> bool:
        """Its starter has exited without stopping it (and it is not a kept server)."""
        return self.owner != 0 and not alive(self.owner)


def remote_address(remote: str) -> tuple[str, int]:
    """(host, port) of a Spark Connect URL, `sc://host:port/;param=value`."""
    parsed = urlparse(remote.split(";", 1)[0])
    if parsed.scheme != "sc" or not parsed.hostname:
        raise SparkServerError(f"not a Spark Connect URL (sc://host:port): {remote!r}")
    return parsed.hostname, parsed.port or DEFAULT_PORT


def answers(host: str, port: int, *, timeout: float = 1.0) -> bool:
    """Whether something accepts connections at host:port."""
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return True
    except OSError:
        return False


def free_port(preferred: int | None = None, *, besides: int | None = None) -> int:
    """`preferred` when it is free, else any free port other than `besides`."""
    while True:
        with socket.socket() as s:
            # A port whose last server just stopped is still in TIME_WAIT; it is free for
            # a server (the JVM binds with SO_REUSEADDR). One with a listener is not.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((HOST, preferred or 0))
            except OSError:
                s.bind((HOST, 0))
            port = s.getsockname()[1]
        if port != besides:
            return port
        preferred = None


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def start_daemon(log: Path, args: list[str], env: Mapping[str, str]) -> int:
    """`spark-class ARGS` detached in a process group of its own (so a Ctrl-C in the
    terminal that started it does not reach it, and it can be stopped whole by its pid),
    its output appended to `log`. Returns its pid."""
    from resources.spark import ensure_java

    log.parent.mkdir(parents=True, exist_ok=True)
    # A run that revives the server has SPARK_REMOTE set (that is how it attaches), and
    # spark-submit refuses to start a server given both a remote and a master.
    inherited = {name: value for name, value in os.environ.items() if name not in CLIENT_ONLY}
    with log.open("ab") as output:
        process = subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *args],
            env={
                **inherited,
                **env,
                "SPARK_HOME": str(spark_home()),
                "JAVA_HOME": ensure_java(),
                "SPARK_LOCAL_IP": HOST,
            },
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return process.pid


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A child that exited but was not reaped by its (gone) parent counts as stopped.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return True


def stop_processes(pids: list[int], *, grace: float = 30.0) -> list[int]:
    """SIGTERM each pid's process group, SIGKILL what is left after `grace` seconds."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for pid in pids:
        while time.monotonic() < deadline and alive(pid):
            time.sleep(0.2)
        if alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
    return pids


class SparkServer:
    """The Spark Connect server described in `state` (a folder of its own)."""

    def __init__(self, state: Path | str) -> None:
        self.state = Path(state)
        self.described = self.state / "server.json"

    def description(self) -> ServerDescription | None:
        try:
            return ServerDescription(**json.loads(self.described.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def running(self) -> ServerDescription | None:
        """The description, when its process lives and its port answers."""
        described = self.description()
        if described and alive(described.pid) and _serving(described):
            return described
        return None

    def _locked(self) -> contextlib.AbstractContextManager[None]:
        self.state.mkdir(parents=True, exist_ok=True)
        return _file_lock(self.state / "lock")

    def ensure(
        self,
        *,
        master: str = "local[*]",
        config: Mapping[str, str] | None = None,
        port: int | None = None,
        jdbc_port: int | None = None,
        owner: int | None = None,
        say: Callable[[str], None] | None = None,
        timeout: float = START_TIMEOUT,
    ) -> tuple[ServerDescription, bool]:
        """The running server, started first when there is none (or it died); returns it
        and whether this call started it. A dead server's successor takes its port (the
        URL runs were given) and its owner, unless that one has exited. `config` is the
        server's Spark configuration (`server_config`); `owner` defaults to this process.
        `port` and `jdbc_port` are preferred ports (else Spark's and HiveServer2's
        defaults when free, else any free ones)."""
        with self._locked():
            running = self.running()
            if running is not None:
                return running, False
            previous = self.description()
            if previous is not None:
                stop_processes([previous.pid], grace=5)
                if say:
                    say(
                        f"The long-lived Spark at {previous.remote} is not answering "
                        f"(pid {previous.pid}, log {previous.log}); starting a new one."
                    )
            # Servers of other folders (another deployment, a test process) may be
            # choosing a port at the same moment: until this one answers, its port looks
            # free to them, and a server that loses the race for it finds the winner
            # answering there and takes it for itself.
            with _file_lock(PORTS_LOCK):
                chosen = port or (previous.port if previous else free_port(DEFAULT_PORT))
                jdbc = (
                    jdbc_port
                    or (previous.jdbc_port if previous else 0)
                    or free_port(DEFAULT_JDBC_PORT, besides=chosen)
                )
                for taken, variable in ((chosen, "SPARK_CONNECT_PORT"), (jdbc, "SPARK_JDBC_PORT")):
                    if answers(HOST, taken):
                        raise SparkServerError(
                            f"port {taken} on {HOST} is taken by another process, not the "
                            f"Spark described in {self.described}: stop it, or set {variable}"
                        )
                server = self._start(
                    master=master,
                    config=config or {},
                    port=chosen,
                    jdbc_port=jdbc,
                    owner=(
                        previous.owner
                        if previous and not previous.orphaned
                        else os.getpid()
                        if owner is None
                        else owner
                    ),
                )
                self._wait(server, timeout)
            self._prepare_catalog(server)
            return server, True

    @property
    def catalog(self) -> Path:
        """The folder of the server's catalog: its embedded metastore (unless
        LAKEHOUSE_METASTORE_URL names another) and the marks of registered tables."""
        return self.state / "catalog"

    def _start(
        self, *, master: str, config: Mapping[str, str], port: int, jdbc_port: int, owner: int
    ) -> ServerDescription:
        log = self.state / "spark-connect.log"
        self.catalog.mkdir(parents=True, exist_ok=True)
        settings = {
            **catalog_config(self.catalog),
            **config,
            "spark.master": master,
            "spark.app.name": "idempotent-lakehouse (long-lived Spark)",
            "spark.plugins": CONNECT_PLUGIN,
            "spark.connect.grpc.binding.address": HOST,
            "spark.connect.grpc.binding.port": str(port),
            "spark.hadoop.hive.server2.thrift.bind.host": HOST,
            "spark.hadoop.hive.server2.thrift.port": str(jdbc_port),
        }
        if config.get("spark.jars"):
            # The Thrift server's sessions load Delta's catalog through the driver's own
            # class loader, which `spark.jars` does not reach.
            settings["spark.driver.extraClassPath"] = config["spark.jars"].replace(",", ":")
        args = ["org.apache.spark.deploy.SparkSubmit", "--class", THRIFT_SERVER]
        for key, value in settings.items():
            args += ["--conf", f"{key}={value}"]
        # Its scratch files (Derby, spark-warehouse) stay in its own folder.
        with contextlib.chdir(self.state):
            # Its Python workers (a run's Python functions on executors) run this
            # interpreter, with the project's packages, unless the user chose another.
            python = os.environ.get("PYSPARK_PYTHON", sys.executable)
            environment = {"SPARK_LOG_DIR": str(self.state), "PYSPARK_PYTHON": python}
            pid = start_daemon(log, args, environment)
        server = ServerDescription(
            remote=f"sc://{HOST}:{port}",
            port=port,
            pid=pid,
            master=master,
            log=str(log),
            owner=owner,
            jdbc_port=jdbc_port,
            catalog=str(self.catalog),
        )
        partial = self.described.with_suffix(".partial")
        partial.write_text(json.dumps(asdict(server), indent=2))
        partial.replace(self.described)
        return server

    def _wait(self, server: ServerDescription, timeout: float) -> None:
        """Until the server answers; a server that does not (or a wait interrupted by
        Ctrl-C) is stopped and forgotten."""
        deadline = time.monotonic() + timeout
        try:
            while not _serving(server):
                if not alive(server.pid) or time.monotonic() > deadline:
                    raise SparkServerError(
                        f"the long-lived Spark did not come up on {HOST}:{server.port} (JDBC "
                        f"{server.jdbc_port}) in {timeout:.0f} s; its log: {server.log}"
                    )
                time.sleep(0.3)
        except BaseException:
            stop_processes([server.pid], grace=5)
            self.described.unlink(missing_ok=True)
            raise

    def _prepare_catalog(self, server: ServerDescription) -> None:
        """Its schema created (`Catalog.prepare`) and its query paths warmed
        (`spark_warmup.py`), in a process of its own: the caller may hold a classic Spark
        session, and a process holds a Connect session or a classic one, never both. A
        server whose schema cannot be created is stopped, as one that does not answer is."""
        done = subprocess.run(
            [sys.executable, "-c", PREPARE_CATALOG, server.catalog, server.remote],
            cwd=Path(__file__).resolve().parent.parent,
            env={name: value for name, value in os.environ.items() if name not in CLIENT_ONLY},
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            stop_processes([server.pid], grace=5)
            self.described.unlink(missing_ok=True)
            raise SparkServerError(
                f"the long-lived Spark's catalog could not be prepared: "
                f"{done.stderr.strip()[-2000:]}; its log: {server.log}"
            )

    def stop(self) -> ServerDescription | None:
        """Stop the described server by its pid; returns what was stopped."""
        with self._locked():
            described = self.description()
            if described is None:
                return None
            stop_processes([described.pid])
            self.described.unlink(missing_ok=True)
            return described


def _serving(server: ServerDescription) -> bool:
    """Both its doors answer: Spark Connect, and JDBC when it has one."""
    return answers(HOST, server.port) and (not server.jdbc_port or answers(HOST, server.jdbc_port))


def catalog_config(folder: Path) -> dict[str, str]:
    """The Hive catalog of a server whose catalog lives in `folder`: its metastore
    embedded there (Derby) and the warehouse of schemas created without a location."""
    return {
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": str(folder / "warehouse"),
        "spark.hadoop.javax.jdo.option.ConnectionURL": (
            f"jdbc:derby:;databaseName={folder / 'metastore_db'};create=true"
        ),
    }


def server_state(dagster_home: Path) -> Path:
    """Where the long-lived Spark of a Dagster instance is described: beside the instance,
    in its data folder (`.data/spark/connect` for the project's default instance), so
    deployments with other settings (another object store) never share one."""
    return dagster_home.parent / "spark" / "connect"


def server_config(env: Mapping[str, str], master: str = "local[*]") -> dict[str, str]:
    """The Spark configuration of the long-lived Spark for a deployment configured by
    `env`: Delta loaded from the jar cache, and the object store's settings when the
    AWS_* variables name one (runs attached to it write `s3://` tables through it)."""
    from resources.object_uri import S3_ENVIRONMENT
    from resources.spark import SparkResource

    settings: dict[str, Any] = dict(
        master=master,
        ui_enabled=True,
        driver_memory=env.get("SPARK_DRIVER_MEMORY", ""),
        delta_jars=env.get("DELTA_SPARK_JARS", ""),
    )
    resource = SparkResource(**settings)
    if any(env.get(var) for var in S3_ENVIRONMENT.values()):
        from resources.object_store import S3Spark, storage_from_environment

        resource = S3Spark(**settings, s3=storage_from_environment(env, deferred=False))
    config = {key: str(value) for key, value in resource.spark_config().items()}
    if env.get(METASTORE_URL_ENV):
        metastore = metastore_config(env[METASTORE_URL_ENV])
        jars = [config["spark.jars"], metastore.pop("spark.jars", "")]
        config.update(metastore, **{"spark.jars": ",".join(filter(None, jars))})
    return config


def revive(remote: str, state: str, *, say: Callable[[str], None]) -> None:
    """Before a run attaches to `remote`: if it is the long-lived Spark described in
    `state` and it stopped answering, start a new one on its port (one line to `say`)."""
    host, port = remote_address(remote)
    if answers(host, port):
        return
    server = SparkServer(state)
    described = server.description()
    master = described.master if described else "local[*]"
    server.ensure(master=master, config=server_config(os.environ, master), port=port, say=say)


def _port(env: Mapping[str, str], variable: str) -> int | None:
    return int(env[variable]) if env.get(variable) else None


def metastore_config(url: str) -> dict[str, str]:
    """The server's settings for a metastore database of the user's (LAKEHOUSE_METASTORE_URL,
    a JDBC URL with its credentials as parameters) instead of the embedded one: PostgreSQL,
    its driver from set-up's jar cache, or Derby elsewhere."""
    from resources.spark_packages import postgres_packages, resolved_jars

    if url.startswith("jdbc:postgresql:"):
        return {
            "spark.hadoop.javax.jdo.option.ConnectionURL": url,
            "spark.hadoop.javax.jdo.option.ConnectionDriverName": "org.postgresql.Driver",
            # An empty database gets the metastore's tables on first use, as Derby does,
            # without their foreign keys: DataNucleus adds one to a table it creates while
            # another connection's transaction holds the referenced table (the first
            # CREATE TABLE waits forever on its own grant's table otherwise).
            "spark.hadoop.datanucleus.schema.autoCreateTables": "true",
            "spark.hadoop.datanucleus.schema.autoCreateColumns": "true",
            "spark.hadoop.datanucleus.schema.autoCreateConstraints": "false",
            "spark.hadoop.hive.metastore.schema.verification": "false",
            "spark.jars": ",".join(resolved_jars(postgres_packages())),
        }
    if url.startswith("jdbc:derby:"):
        return {"spark.hadoop.javax.jdo.option.ConnectionURL": url}
    raise SparkServerError(
        f"{METASTORE_URL_ENV} must be a jdbc:postgresql: or jdbc:derby: URL, not {url!r}"
    )


@contextlib.contextmanager
def long_lived_spark(
    state: Path, env: Mapping[str, str], *, say: Callable[[str], None] = print
) -> Iterator[dict[str, str]]:
    """For `make dev` and `make demo`: the variables that point runs at the long-lived
    Spark (a server already up is reused, else one is started and stopped on the way out,
    also on Ctrl-C). Empty when the user chose a Spark with SPARK_REMOTE or SPARK_MASTER:
    theirs wins, and nothing is started."""
    if env.get(REMOTE_ENV) or env.get("SPARK_MASTER"):
        chosen = env.get(REMOTE_ENV) or env.get("SPARK_MASTER")
        say(f"Spark:            {chosen} (yours, from the environment; nothing started)")
        yield {}
        return
    server = SparkServer(state)
    started = time.monotonic()
    described, started_here = server.ensure(
        config=server_config(env),
        port=_port(env, "SPARK_CONNECT_PORT"),
        jdbc_port=_port(env, "SPARK_JDBC_PORT"),
        say=say,
    )
    if started_here:
        say(
            f"Spark:            {described.remote} (long-lived Spark Connect, pid "
            f"{described.pid}, started in {time.monotonic() - started:.0f} s; log "
            f"{described.log})"
        )
    else:
        say(f"Spark:            {described.remote} (the long-lived Spark already up)")
    if described.jdbc:
        say(f"SQL (JDBC):       {described.jdbc} (tables by name; `make sql`)")
    try:
        yield {REMOTE_ENV: described.remote, STATE_ENV: str(state)}
    finally:
        current = server.description()
        # Ours (started here, or its successor after it died), or orphaned (its starter,
        # e.g. a demo beside `make dev`, has exited).
        if current is not None and (started_here or current.orphaned):
            server.stop()
            say(f"Stopped the long-lived Spark (pid {current.pid}).")
