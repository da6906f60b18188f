"""`make dev`: the long-lived Spark, then `dagster dev` with every run attached to it.

    python platform/dev.py [dagster dev options]

Starts (or reuses) the Spark Connect server of resources/spark_server.py and runs
`dagster dev -w workspace.yaml` with SPARK_REMOTE and SPARK_SERVER_STATE in its
environment, which the code server and every run process inherit: a run launched from
the UI, a sensor, a backfill or a schedule attaches to the warm Spark instead of booting
a JVM. On the way out (Ctrl-C, SIGTERM, dagster exiting) it stops the server if it
started it. SPARK_REMOTE or SPARK_MASTER set by the user win: nothing is started then.
Run as a script (`platform/` is not a package: `platform` is a stdlib module name).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

from resources.spark_server import long_lived_spark, server_state  # noqa: E402


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str]) -> int:
    # SIGTERM (e.g. `kill`) takes the same way out as Ctrl-C, so the server is stopped.
    signal.signal(signal.SIGTERM, _interrupted)
    # Ctrl-C's own handler, even when a shell started this with SIGINT ignored (`make dev
    # &` in a script, nohup): an ignored signal stays ignored in `dagster dev`, which
    # would then lose the SIGINT passed on below and, killed after the wait, orphan its
    # webserver, daemon and code servers with the UI's port held. A handled one is back
    # to its default there.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    home = Path(os.environ.get("DAGSTER_HOME", PROJECT_ROOT / ".data" / "dagster"))
    print(f"Dagster instance: {home}")
    with long_lived_spark(server_state(home), os.environ) as spark_env:
        command = [sys.executable, "-m", "dagster", "dev", "-w", "workspace.yaml", *argv]
        print("Dagster:          `dagster dev`, UI on http://127.0.0.1:3000 unless -p says")
        print("Stop both with Ctrl-C.", flush=True)
        dagster = subprocess.Popen(command, cwd=PROJECT_ROOT, env={**os.environ, **spark_env})
        try:
            return dagster.wait()
        except KeyboardInterrupt:
            # The terminal's Ctrl-C reached dagster too (same process group); a SIGTERM
            # sent to this process alone is passed on.
            if dagster.poll() is None:
                dagster.send_signal(signal.SIGINT)
            try:
                return dagster.wait(timeout=60)
            except subprocess.TimeoutExpired:
                dagster.kill()
                return dagster.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
