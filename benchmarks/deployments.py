"""Where Spark runs, side by side in one run, all with the delta-spark engine:

- `local[*]`: a fresh Spark in each run process (the embedded default);
- a standalone cluster (master + 2 workers on 127.0.0.1, `SPARK_MASTER=spark://...`): a
  fresh driver per run, executors on the workers;
- a long-lived Spark (a Spark Connect server on `local[*]`, `SPARK_REMOTE=sc://...`): runs
  attach to it and start no JVM. It is not put on the cluster: it would hold one of the
  cluster's two cores for its whole life (an application takes one core there), and the
  cluster runs beside it would have one left.

1. Run overhead: `dagster asset materialize` of one small `devices` day (a run's whole
   life: process, definitions, Spark, MERGE, metadata), median of RUNS runs per mode.
2. The demo's pipelines (`python -m demo`: 28 days and 5 weeks of visits, late files,
   sensor runs, telemetry), once per mode; the content checksums must agree.

Run: `.venv/bin/python benchmarks/deployments.py` (about 15 minutes). The cluster and the
server are started here and stopped by pid at the end, also on failure.
"""

from __future__ import annotations

import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CLUSTER_SCRIPT = PROJECT_ROOT / "platform" / "spark_cluster.py"
DEFINITIONS = PROJECT_ROOT / "platform" / "definitions.py"
RUNS = 3
DEVICES = "type;full_name;version\nphone;Pixel {n};{n}.0\ntablet;Tab {n};{n}.1\n"
CHECKSUM = re.compile(r"content checksum\S* (\w+)")


def spark_cluster(command: str, state: Path) -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, str(CLUSTER_SCRIPT), command, "--state", str(state)],
        check=True,
        capture_output=True,
        text=True,
    )
    return dict(re.findall(r"export (\w+)=(\S+)", done.stdout))


def fresh_home(work: Path) -> dict[str, str]:
    home = work / "dagster"
    subprocess.run(  # the instance `make setup` writes
        [sys.executable, str(PROJECT_ROOT / "platform" / "instance.py"), str(home)],
        check=True,
        capture_output=True,
    )
    return {
        "DAGSTER_HOME": str(home),
        "LAKEHOUSE_ROOT": str(work / "lakehouse"),
        "LANDING_ROOT": str(work / "landing"),
        "LAKEHOUSE_ENGINE": "delta-spark",
    }


def timed(command: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.monotonic()
    done = subprocess.run(
        command, cwd=PROJECT_ROOT, env={**os.environ, **env}, capture_output=True, text=True
    )
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(
            f"{' '.join(command[:6])} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    return seconds, done.stdout


def run_overhead(work: Path, modes: dict[str, dict[str, str]]) -> dict[str, float]:
    """Median seconds of a one-day `devices` run per mode; each run a new day."""
    env = {mode: {**fresh_home(work / mode), **settings} for mode, settings in modes.items()}
    seconds: dict[str, list[float]] = {mode: [] for mode in modes}
    for n in range(1, RUNS + 1):
        for mode, settings in env.items():  # interleaved: load hits every mode alike
            day = f"2024-01-{n:02d}"
            landing = Path(settings["LANDING_ROOT"]) / "devices_cdc"
            landing.mkdir(parents=True, exist_ok=True)
            (landing / f"{day}.csv").write_text(DEVICES.format(n=n))
            command = [sys.executable, "-m", "dagster", "asset", "materialize"]
            command += ["-f", str(DEFINITIONS), "--select", "devices", "--partition", day]
            seconds[mode].append(timed(command, settings)[0])
    return {mode: statistics.median(values) for mode, values in seconds.items()}


def demo(work: Path, modes: dict[str, dict[str, str]]) -> dict[str, tuple[float, list[str]]]:
    results = {}
    for mode, settings in modes.items():
        seconds, output = timed(
            [sys.executable, "-u", "-m", "demo"], {**fresh_home(work / mode), **settings}
        )
        results[mode] = (seconds, CHECKSUM.findall(output))
    return results


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="bench-deployments-") as tmp:
        work = Path(tmp)
        state, server_state = work / "spark", work / "spark-connect"
        try:
            cluster = spark_cluster("up", state)
            connect = spark_cluster("connect", server_state)
            modes = {
                "local[*]": {},
                "cluster": {"SPARK_MASTER": cluster["SPARK_MASTER"]},
                "long-lived (Connect)": {"SPARK_REMOTE": connect["SPARK_REMOTE"]},
            }
            overhead = run_overhead(work / "overhead", modes)
            pipelines = demo(work / "demo", modes)
        finally:
            spark_cluster("down", server_state)
            spark_cluster("down", state)

    local = overhead["local[*]"]
    print(f"Run overhead: one small `devices` day per run, median of {RUNS} runs")
    for mode, seconds in overhead.items():
        print(f"  {mode:<22} {seconds:6.1f} s   {seconds / local:5.2f}x local")
    print("\nThe demo's pipelines (python -m demo), delta-spark")
    base_seconds, base_checksums = pipelines["local[*]"]
    agree = True
    for mode, (seconds, checksums) in pipelines.items():
        same = checksums == base_checksums and bool(checksums)
        agree &= same
        print(
            f"  {mode:<22} {seconds:6.0f} s   {seconds / base_seconds:5.2f}x local   "
            f"checksums {'identical' if same else 'DIFFER'}"
        )
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
