"""What the demo's report compares: content checksums of the tables, and whether this run
reproduced the previous run's (kept beside the Dagster instance)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path


def checksum(rows: Iterable) -> str:
    """Of the rows' content, whatever their order."""
    digest = hashlib.sha256()
    for row in sorted(rows):
        digest.update(repr(row).encode())
    return digest.hexdigest()[:16]


def compare_with_previous(path: Path, checksums: Mapping[str, str]) -> str:
    """A sentence on how `checksums` compare with the previous run's; stores them."""
    previous = json.loads(path.read_text()) if path.exists() else None
    path.write_text(json.dumps(dict(checksums), indent=2, sort_keys=True) + "\n")
    if previous is None:
        return f"First run here: checksums kept in {path} for the next run to compare."
    moved = sorted(t for t in checksums if previous.get(t) != checksums[t])
    if not moved:
        return f"Every table reproduced the previous run's checksum ({len(checksums)} tables)."
    return "Checksums differ from the previous run's for: " + ", ".join(
        f"{t} ({previous.get(t, 'absent')} -> {checksums[t]})" for t in moved
    )
