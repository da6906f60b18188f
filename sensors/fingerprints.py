"""Sensor cursors of file fingerprints: a file is hashed again only when its size or
mtime moved, so an unchanged, re-notified file costs a stat and a comparison. A label
per file (e.g. its subject) can ride along, worked out once per content."""

import json
from collections.abc import Mapping

from resources.landing import Fingerprint


def load_fingerprints(cursor: str | None) -> tuple[dict[str, Fingerprint], dict[str, str]]:
    """(fingerprints by path, labels by path)."""
    if not cursor:
        return {}, {}
    entries = json.loads(cursor)
    fingerprints = {path: Fingerprint(path, *values[:3]) for path, values in entries.items()}
    labels = {path: values[3] for path, values in entries.items() if len(values) > 3}
    return fingerprints, labels


def dump_fingerprints(
    fingerprints: Mapping[str, Fingerprint], labels: Mapping[str, str] | None = None
) -> str:
    labels = labels or {}
    return json.dumps(
        {
            p: [f.size, f.mtime_ns, f.sha256, *([labels[p]] if p in labels else [])]
            for p, f in sorted(fingerprints.items())
        },
        separators=(",", ":"),
        ensure_ascii=False,
    )
