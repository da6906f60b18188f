"""Subjects (tools): the `subjects` dynamic partitions and the rules that find a file's subject.

A subject key is whatever the deployment names its tools: quotes, spaces and non-ASCII
letters are fine everywhere (partition keys, predicates, paths, tags). Dagster cannot show
a partition key holding "..." (it means a range in the UI) or control characters; such a
key is refused by name instead of breaking the sensor.
"""

import re
import unicodedata
from collections.abc import Callable
from pathlib import PurePosixPath

import dagster as dg

from assets.telemetry.settings import LANDING_PREFIX, TelemetrySettings

subjects = dg.DynamicPartitionsDefinition(name="subjects")

SUBJECT_TAG = "telemetry/subject"
MAX_SUBJECT_KEY_LENGTH = 200


def partition_key_problem(key: str) -> str | None:
    """Why `key` cannot be a Dagster partition key, or None when it can."""
    if not key.strip():
        return "the subject key is empty"
    if "..." in key:
        return "it contains '...', which the Dagster UI reads as a partition range"
    if any(unicodedata.category(ch) == "Cc" for ch in key):
        return "it contains a control character (tab, newline, ...)"
    if len(key) > MAX_SUBJECT_KEY_LENGTH:
        return f"it is longer than {MAX_SUBJECT_KEY_LENGTH} characters"
    return None


def subject_of(path: str, settings: TelemetrySettings, head: Callable[[], bytes]) -> str | None:
    """The subject key of the report file at `path` (relative to the landing root), or None
    when the rule finds none. `head` returns the file's first bytes (read only for the
    header rule)."""
    parts = PurePosixPath(path).parts
    if len(parts) < 2 or parts[0] != LANDING_PREFIX:
        return None
    if settings.subject_rule == "folder":
        # telemetry/<subject>/<file>: files in deeper folders follow no layout.
        return parts[1] if len(parts) == 3 else None
    if settings.subject_rule == "file_name":
        match = re.search(settings.file_name_pattern, parts[-1])
        return match.group("subject") if match and match.group("subject") else None
    first_line = head().split(b"\n", 1)[0].decode("utf-8", errors="replace").strip()
    if first_line.startswith(settings.header_prefix):
        return first_line[len(settings.header_prefix) :].strip() or None
    return None


def app_id(subject_key: str) -> str:
    """The Delta app-transaction id under which one subject's writes advance."""
    return f"telemetry/{subject_key}"
