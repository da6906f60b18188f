"""Where the Spark JVM's console output goes: a file per process, whose new lines are handed
to the run's log at WARN, instead of the terminal of `dagster dev` or of the demo.

The JVM inherits the standard error of the process that launches it (pyspark gives it no
other), and writes its launcher warnings and log4j's console lines there for as long as it
lives. So standard error is pointed at the file just while the JVM starts: the JVM keeps
the file, this process gets its own standard error back. The file goes when the run ends.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

MAX_LINES = 200
"""Lines handed over at a time (a log4j stack trace can be long)."""


@contextlib.contextmanager
def stderr_to(path: Path) -> Iterator[None]:
    """Point this process's standard error (descriptor 2, which child processes such as
    the JVM inherit) at `path`, appending, and restore it on the way out."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    with path.open("ab") as log:
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


class JvmOutput:
    def __init__(self) -> None:
        handle, name = tempfile.mkstemp(prefix="spark-jvm-", suffix=".log")
        os.close(handle)
        self.path = Path(name)
        self._read = 0
        # Removed by `close`, or else when this object goes or the process exits: a Spark
        # used outside a run (a script, a test session) has no teardown to close it.
        self._remove = weakref.finalize(self, self.path.unlink, missing_ok=True)

    def captured(self) -> contextlib.AbstractContextManager[None]:
        """Standard error (descriptor 2) goes to the file inside the block."""
        return stderr_to(self.path)

    def forward(self, warn: Callable[[str], None]) -> int:
        """Hand the lines written since the last call to `warn`; returns how many."""
        with self.path.open("rb") as log:
            log.seek(self._read)
            text = log.read()
        # Up to the last complete line: a line being written waits for the next call.
        complete = text[: text.rfind(b"\n") + 1]
        self._read += len(complete)
        lines = [line for line in complete.decode(errors="replace").splitlines() if line.strip()]
        if not lines:
            return 0
        shown = lines[:MAX_LINES]
        if len(lines) > MAX_LINES:
            shown.append(f"... and {len(lines) - MAX_LINES} more lines")
        warn("Spark JVM output:\n" + "\n".join(shown))
        return len(lines)

    def close(self) -> None:
        """Remove the file (a JVM still running writes on into the unlinked file)."""
        self._remove()
