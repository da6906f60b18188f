"""The production profile's servers on 127.0.0.1, each a real server started by its pid,
logging into its folder, and stopped on the way out (also when what ran inside failed):

- an S3-compatible object store: s3proxy (Maven Central, `org.gaul:s3proxy`), over its
  filesystem backend. A real S3 server, not a mocking library; it installs from a
  registry every machine here reaches and runs on the Java that Spark already needs; and
  it enforces conditional writes (`If-None-Match: *`), which delta-rs commits rely on
  (`resources/object_store.py`). Its jar is fetched once into the cache, checked
  against the digest pinned here.
- PostgreSQL: the binaries of the `pgserver` wheel (its Python module, which would create
  system users and change folder modes when run as root, is not used).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import psycopg2

HOST = "127.0.0.1"
S3PROXY_VERSION = "4.1.0"
S3PROXY_SHA1 = "0a0b89e982bc1b1b5757d45b61109e05a840dd87"
S3PROXY_URL = (
    "https://repo1.maven.org/maven2/org/gaul/s3proxy/{v}/s3proxy-{v}-jar-with-dependencies.jar"
)
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "idempotent-lakehouse"


def wait_for_port(port: int, process: subprocess.Popen, *, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server process {process.pid} exited with {process.returncode}")
        try:
            socket.create_connection((HOST, port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on {HOST}:{port} after {timeout} s")


def stop(process: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    """Stops `process` with `sig`, then SIGKILL after 30 s."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def s3proxy_jar(cache: Path = CACHE) -> Path:
    """s3proxy's runnable jar, fetched from Maven Central the first time."""
    jar = cache / "s3proxy" / f"s3proxy-{S3PROXY_VERSION}-jar-with-dependencies.jar"
    if jar.is_file():
        return jar
    jar.parent.mkdir(parents=True, exist_ok=True)
    partial = jar.with_suffix(".part")
    with urllib.request.urlopen(S3PROXY_URL.format(v=S3PROXY_VERSION), timeout=120) as source:
        partial.write_bytes(source.read())
    digest = hashlib.sha1(partial.read_bytes()).hexdigest()  # Maven Central's own checksum
    if digest != S3PROXY_SHA1:
        partial.unlink()
        raise RuntimeError(f"s3proxy {S3PROXY_VERSION}: sha1 {digest}, not {S3PROXY_SHA1}")
    partial.rename(jar)
    return jar


@contextmanager
def object_store(folder: Path, port: int, access_key: str, secret_key: str) -> Iterator[str]:
    """s3proxy on `port`, its buckets folders under `folder/data`; yields its endpoint."""
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    endpoint = f"http://{HOST}:{port}"
    properties = folder / "s3proxy.conf"
    properties.write_text(
        f"s3proxy.endpoint={endpoint}\n"
        "s3proxy.authorization=aws-v2-or-v4\n"
        f"s3proxy.identity={access_key}\n"
        f"s3proxy.credential={secret_key}\n"
        "jclouds.provider=filesystem\n"
        f"jclouds.filesystem.basedir={data}\n"
    )
    with (folder / "s3proxy.log").open("ab") as log:
        process = subprocess.Popen(
            ["java", "-jar", str(s3proxy_jar()), "--properties", str(properties)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for_port(port, process)
        yield endpoint
    finally:
        stop(process)


def _postgres_bin() -> Path:
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pgserver is not installed: run `make setup`")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


@contextmanager
def postgres(folder: Path, port: int, settings: Mapping[str, str] | None = None) -> Iterator[str]:
    """A PostgreSQL server on `port`, its cluster in `folder/db` (created on first use;
    trust authentication, TCP on loopback only, `settings` as `-c name=value`); yields
    the URL of its `postgres` database. PostgreSQL refuses to run as root, so as root it
    runs as `nobody`, in a folder `nobody` owns, with its own copy of the wheel's
    binaries (`nobody` may not reach the project's folder)."""
    binaries = _postgres_bin()
    folder.mkdir(parents=True, exist_ok=True)
    as_user: dict[str, int] = {}
    if os.geteuid() == 0:
        closed = [p for p in folder.resolve().parents if not p.stat().st_mode & 0o001]
        if closed:
            raise RuntimeError(
                f"PostgreSQL runs as `nobody` under root, and {closed[0]} is closed to it: "
                f"put {folder} where every user may pass (chmod o+x), or run as a user"
            )
        nobody = pwd.getpwnam("nobody")
        os.chown(folder, nobody.pw_uid, nobody.pw_gid)
        as_user = {"user": nobody.pw_uid, "group": nobody.pw_gid}
        own = folder / "pgserver" / "pginstall"
        if not own.exists():
            # Laid out as in site-packages: the binaries find their libraries there.
            shutil.copytree(binaries.parents[2] / "pgserver.libs", folder / "pgserver.libs")
            shutil.copytree(binaries.parent, own)
        binaries = own / "bin"
    if not (folder / "db").exists():
        subprocess.run(
            [binaries / "initdb", "-D", folder / "db", "-U", "postgres", "--auth=trust"],
            check=True,
            capture_output=True,
            cwd=folder,
            **as_user,
        )
    with (folder / "server.log").open("ab") as log:
        process = subprocess.Popen(
            [binaries / "postgres", "-D", folder / "db", "-h", HOST, "-p", str(port)]
            + ["-c", "unix_socket_directories="]
            + [arg for item in (settings or {}).items() for arg in ("-c", "=".join(item))],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=folder,
            start_new_session=True,
            **as_user,
        )
    try:
        wait_for_port(port, process)
        yield f"postgresql://postgres@{HOST}:{port}/postgres"
    finally:
        stop(process, signal.SIGINT)  # PostgreSQL's fast shutdown


def create_databases(url: str, names: Iterable[str]) -> None:
    """The databases `names` on the server of `url`, created when missing."""
    connection = psycopg2.connect(url)
    connection.autocommit = True  # CREATE DATABASE runs outside transactions
    try:
        cursor = connection.cursor()
        for name in names:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if cursor.fetchone() is None:
                cursor.execute(f'CREATE DATABASE "{name}"')
    finally:
        connection.close()
