"""Big data never funnels through the Dagster process: a visits day of 1 GiB and one of
4 GiB, materialized with delta-spark on a Spark standalone cluster on this machine.

Each day is materialized by `dagster asset materialize` in its own run process, as the
run launcher would start it. While it runs, every process is sampled:
- the run process (Python) and its driver JVM: peak resident memory (VmHWM, per process,
  summed: an upper bound of their joint peak) and CPU seconds;
- the cluster's executor JVMs (children of the workers): CPU seconds.
Pass: run-process peak memory at 4 GiB / at 1 GiB <= 1.2, and the executors do the work
(their CPU time grows with the input, the run process's does not follow it).

Run: `.venv/bin/python benchmarks/big_day.py` (about 15 minutes; needs ~12 GiB of disk
under the temporary directory). It starts the cluster and stops it by pid at the end.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CLUSTER_SCRIPT = PROJECT_ROOT / "platform" / "spark_cluster.py"
DEFINITIONS = PROJECT_ROOT / "platform" / "definitions.py"
FILE_BYTES = 128 * 2**20
DAYS = {"1 GiB": dt.date(2024, 3, 1), "4 GiB": dt.date(2024, 3, 2)}
SIZES = {"1 GiB": 2**30, "4 GiB": 4 * 2**30}
MAX_RATIO = 1.2
DRIVER_MEMORY = "512m"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def write_day(landing: Path, day: dt.date, total_bytes: int) -> int:
    """Visits files of FILE_BYTES each under the day's folder; returns the lines written."""
    folder = landing / "visits" / f"date={day.isoformat()}"
    folder.mkdir(parents=True)
    lines = 0
    for part in range(total_bytes // FILE_BYTES):
        chunks, size, i = [], 0, 0
        while size < FILE_BYTES:
            seconds = (lines + i) % 86_400
            line = (
                f'{{"visit_id": "{day:%m%d}-{part:03d}-{i:08d}", "user_id": "u{i % 50_000:05d}", '
                f'"event_time": "{day.isoformat()}T{seconds // 3600:02d}:{seconds // 60 % 60:02d}:'
                f'{seconds % 60:02d}Z", "page": "/products/{i % 997}", '
                f'"context": {{"referrer": "https://example.com/{i % 113}", "ab": "b"}}}}\n'
            )
            chunks.append(line)
            size += len(line)
            i += 1
        (folder / f"part-{part:03d}.jsonl").write_text("".join(chunks))
        lines += i
    return lines


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                children = Path(f"/proc/{current}/task/{task}/children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                found.append(child)
                todo.append(child)
    return found


def _peak_rss(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@dataclass
class Sampler:
    """Polls /proc for the run process tree and the executors until stopped; per pid it
    keeps the last value seen (peaks and CPU times only grow)."""

    run_pid: int
    worker_pids: list[int]
    run_peak: dict[int, int] = field(default_factory=dict)
    run_cpu: dict[int, float] = field(default_factory=dict)
    executor_cpu: dict[int, float] = field(default_factory=dict)
    commands: dict[int, str] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> None:
        for pid in [self.run_pid, *_descendants(self.run_pid)]:
            peak, cpu = _peak_rss(pid), _cpu_seconds(pid)
            if peak is not None:
                self.run_peak[pid] = peak
                # Spark's launcher script execs the JVM in the same process: look again.
                self.commands[pid] = _command(pid).split(" ", 1)[0]
            if cpu is not None:
                self.run_cpu[pid] = cpu
        for worker in self.worker_pids:
            for pid in _descendants(worker):
                cpu = _cpu_seconds(pid)
                if cpu is not None and "CoarseGrainedExecutorBackend" in _command(pid):
                    self.executor_cpu[pid] = cpu

    def run(self) -> None:
        while not self._stop.wait(0.2):
            self.sample()

    def stop(self) -> None:
        self._stop.set()


@dataclass(frozen=True)
class Measurement:
    seconds: float
    python_peak_bytes: int
    jvm_peak_bytes: int
    run_cpu: float
    executor_cpu: float

    @property
    def run_peak_bytes(self) -> int:
        return self.python_peak_bytes + self.jvm_peak_bytes


def materialize(day: dt.date, env: dict[str, str], workers: list[int]) -> Measurement:
    command = [sys.executable, "-m", "dagster", "asset", "materialize", "-f", str(DEFINITIONS)]
    command += ["--select", "visits_daily", "--partition", day.isoformat()]
    started = time.monotonic()
    process = subprocess.Popen(
        command, env=env, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    sampler = Sampler(process.pid, workers)
    thread = threading.Thread(target=sampler.run, daemon=True)
    thread.start()
    try:
        output = process.communicate()[0].decode(errors="replace")
    finally:
        if process.poll() is None:
            process.kill()
        sampler.stop()
        thread.join()
    seconds = time.monotonic() - started
    if process.returncode != 0:
        raise SystemExit(f"materializing {day} failed:\n{output[-4000:]}")
    jvm = {pid for pid in sampler.run_peak if "java" in sampler.commands.get(pid, "")}
    return Measurement(
        seconds,
        sum(peak for pid, peak in sampler.run_peak.items() if pid not in jvm),
        sum(peak for pid, peak in sampler.run_peak.items() if pid in jvm),
        sum(sampler.run_cpu.values()),
        sum(sampler.executor_cpu.values()),
    )


def cluster(state: Path, command: str) -> dict:
    subprocess.run(
        [sys.executable, str(CLUSTER_SCRIPT), command, "--state", str(state)]
        + (["--worker-memory", "4g"] if command == "up" else []),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    described = state / "cluster.json"
    return json.loads(described.read_text()) if described.exists() else {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", type=Path, default=None, help="default: a temporary one")
    args = parser.parse_args()
    # A stopped benchmark still stops its run process and the cluster (the `finally`s).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(dir=args.work_dir) as tmp:
        work = Path(tmp)
        lines = {}
        for label, day in DAYS.items():
            started = time.monotonic()
            lines[label] = write_day(work / "landing", day, SIZES[label])
            took = time.monotonic() - started
            print(f"wrote the {label} day: {lines[label]:,} visits in {took:.0f} s")
        (work / "dagster").mkdir()
        (work / "dagster" / "dagster.yaml").write_text(
            (PROJECT_ROOT / "platform" / "dagster.yaml").read_text()
        )
        state = work / "cluster"
        described = cluster(state, "up")
        try:
            env = {
                **os.environ,
                "DAGSTER_HOME": str(work / "dagster"),
                "LANDING_ROOT": str(work / "landing"),
                "LAKEHOUSE_ROOT": str(work / "lakehouse"),
                "LAKEHOUSE_ENGINE": "delta-spark",
                "SPARK_MASTER": described["master_url"],
                "SPARK_EXECUTOR_MEMORY": "3g",
                "SPARK_CORES_MAX": "2",  # both workers' cores for the one run measured
                # The driver plans and commits; a heap far smaller than the day proves
                # that no data passes through it (it would fail, not just grow).
                "SPARK_DRIVER_MEMORY": DRIVER_MEMORY,
            }
            workers = described["pids"][1:]
            results = {label: materialize(day, env, workers) for label, day in DAYS.items()}
        finally:
            cluster(state, "down")

    print(
        f"\nvisits_daily, delta-spark, standalone cluster (2 workers x 1 core), "
        f"{FILE_BYTES // 2**20} MiB files, driver heap {DRIVER_MEMORY}"
    )
    print(
        f"{'day':>6} {'visits':>12} {'wall s':>7} {'peak MiB: Python':>17} {'JVM':>6} "
        f"{'total':>6} {'run CPU s':>10} {'executor CPU s':>15}"
    )
    for label, m in results.items():
        print(
            f"{label:>6} {lines[label]:>12,} {m.seconds:>7.0f} "
            f"{m.python_peak_bytes / 2**20:>17.0f} {m.jvm_peak_bytes / 2**20:>6.0f} "
            f"{m.run_peak_bytes / 2**20:>6.0f} {m.run_cpu:>10.0f} {m.executor_cpu:>15.0f}"
        )
    small, large = results["1 GiB"], results["4 GiB"]
    ratio = large.run_peak_bytes / small.run_peak_bytes
    print(
        f"\nrun-process peak memory (Python + driver JVM), 4 GiB / 1 GiB: {ratio:.2f} "
        f"(bound {MAX_RATIO})"
    )
    print(
        f"executor CPU, 4 GiB / 1 GiB: {large.executor_cpu / small.executor_cpu:.2f}; "
        f"run-process CPU, 4 GiB / 1 GiB: {large.run_cpu / small.run_cpu:.2f}"
    )
    return 0 if ratio <= MAX_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
