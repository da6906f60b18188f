"""The JVM packages Spark needs beyond pyspark, resolved from Maven once, then reused.

Spark gets Delta Lake the way its users do: the `io.delta:delta-spark_2.13` artifact of
the installed delta-spark version (and, for `s3://` roots, `hadoop-aws` of the Hadoop
version pyspark bundles, with its matching AWS SDK; PostgreSQL's JDBC driver for a
metastore there), resolved by Spark's own Ivy
(`spark.jars.packages`). Set-up resolves them into a cache and records the jar files;
every later session loads those files (`spark.jars`) and never touches the network, so
a run cannot fail, or stall, on a download. `DELTA_SPARK_JARS` (explicit jar files) wins
for clusters without Maven access.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

SCALA_BINARY = "2.13"  # the Scala line pyspark 4 is built with
CACHE_ENV = "SPARK_PACKAGES_CACHE"


class SparkPackagesError(RuntimeError):
    """Spark's packages are not resolved (or not resolvable) in the cache."""


def pyspark_jars_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def hadoop_version() -> str:
    """The Hadoop version pyspark ships (hadoop-aws must match it exactly)."""
    for jar in pyspark_jars_dir().glob("hadoop-client-api-*.jar"):
        match = re.fullmatch(r"hadoop-client-api-(.+)\.jar", jar.name)
        if match:
            return match.group(1)
    raise SparkPackagesError(f"no hadoop-client-api jar in {pyspark_jars_dir()}")


def delta_packages() -> list[str]:
    return [f"io.delta:delta-spark_{SCALA_BINARY}:{metadata.version('delta-spark')}"]


def s3_packages() -> list[str]:
    # hadoop-aws depends on the AWS SDK v2 bundle of the version it was built with.
    return [f"org.apache.hadoop:hadoop-aws:{hadoop_version()}"]


POSTGRES_DRIVER_VERSION = "42.7.4"


def postgres_packages() -> list[str]:
    """The JDBC driver of a PostgreSQL metastore (LAKEHOUSE_METASTORE_URL)."""
    return [f"org.postgresql:postgresql:{POSTGRES_DRIVER_VERSION}"]


def cache_dir() -> Path:
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "idempotent-lakehouse" / "spark-packages"


def _manifest(packages: Sequence[str], cache: Path) -> Path:
    key = hashlib.sha256("\n".join(sorted(packages)).encode()).hexdigest()[:16]
    return cache / f"resolved-{key}.txt"


def resolved_jars(packages: Sequence[str], *, cache: Path | None = None) -> list[str]:
    """The jar files set-up resolved for `packages`; raises when they are not there."""
    cache = cache or cache_dir()
    manifest = _manifest(packages, cache)
    if not manifest.is_file():
        raise SparkPackagesError(
            f"Spark packages {', '.join(packages)} are not resolved in {cache}: run "
            "`make setup` once with access to "
            "Maven Central, or set DELTA_SPARK_JARS to the jar files"
        )
    jars = manifest.read_text().split()
    missing = [jar for jar in jars if not Path(jar).is_file()]
    if missing:
        raise SparkPackagesError(
            f"{len(missing)} resolved jars are gone from {cache} (e.g. {missing[0]}): run "
            "`make setup` again"
        )
    return jars


def resolve(packages: Sequence[str], *, cache: Path | None = None) -> list[str]:
    """Resolve `packages` with Spark's Ivy into `cache` (a no-op when already there) and
    record their jar files. Starts a short local JVM; run by set-up, never by a run.

    Spark resolves packages only when it launches its JVM: call this once per process
    (`main` starts a process per package group)."""
    cache = cache or cache_dir()
    try:
        return resolved_jars(packages, cache=cache)
    except SparkPackagesError:
        pass
    from pyspark.sql import SparkSession

    from resources.spark import ensure_java

    ensure_java()
    cache.mkdir(parents=True, exist_ok=True)
    session = (
        SparkSession.builder.master("local[1]")
        .appName("resolve-spark-packages")
        .config("spark.ui.enabled", "false")
        .config("spark.jars.packages", ",".join(packages))
        .config("spark.jars.ivy", str(cache / "ivy"))
        .getOrCreate()
    )
    try:
        uris = session.sparkContext.getConf().get("spark.jars", "")
    finally:
        session.stop()
    jars = [uri.removeprefix("file://") for uri in uris.split(",") if uri]
    if not jars:
        raise SparkPackagesError(f"Spark resolved no jars for {', '.join(packages)}")
    _manifest(packages, cache).write_text("\n".join(jars) + "\n")
    return jars


PACKAGE_GROUPS = {"delta": delta_packages, "s3": s3_packages, "postgres": postgres_packages}
RUN_MAIN = "import sys; from resources.spark_packages import main; main(sys.argv[1:])"


def main(argv: Sequence[str]) -> None:
    if argv:
        [group] = argv
        packages = PACKAGE_GROUPS[group]()
        jars = resolve(packages)
        size = sum(Path(j).stat().st_size for j in jars) / 2**20
        print(f"Spark packages {', '.join(packages)}: {len(jars)} jars, {size:.0f} MiB, cached")
        return
    for group in PACKAGE_GROUPS:
        # Each group in a process of its own: a JVM resolves one set of packages. Not
        # `-m resources.spark_packages`: the `resources` package imports this module
        # first, and runpy warns about running it again as __main__.
        subprocess.run([sys.executable, "-c", RUN_MAIN, group], check=True)
