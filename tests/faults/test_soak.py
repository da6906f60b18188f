"""The chaos soak, shortened (benchmarks/soak.py; `make soak` runs it for 5 minutes):
two minutes of three sources landing while run processes, the long-lived Spark, the code
server, the daemon and the webserver are killed and the disk fills, then every table must
equal what plain Python computes from the files, with nothing left queued."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support import PROJECT_ROOT

pytestmark = pytest.mark.slow


@pytest.mark.timeout(1800)
def test_two_minutes_of_faults_under_load_leave_every_table_right():
    done = subprocess.run(
        [sys.executable, "-u", "benchmarks/soak.py", "--seed", "7", "--minutes", "2"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "PASS" in done.stdout
