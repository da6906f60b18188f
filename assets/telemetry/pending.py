"""Which subjects have pending work: the sensor's decision, from fingerprints and the
control tables alone (no data is read)."""

import datetime as dt
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from assets.telemetry.control import FileState


@dataclass(frozen=True)
class PendingSubject:
    subject_key: str
    reasons: tuple[tuple[str, str], ...]
    """(source or "*", why) pairs, sorted."""
    state_marker: str
    """What the subject's recorded state is; part of the run key."""

    @property
    def run_key(self) -> str:
        digest = hashlib.sha256(repr((self.reasons, self.state_marker)).encode()).hexdigest()
        return f"telemetry:{self.subject_key}:{digest[:24]}"


def file_reason(
    sha256: str,
    state: FileState | None,
    *,
    blacklisted: bool,
    released: bool,
    now: dt.datetime,
) -> str | None:
    """Why a landed file (content hash `sha256`) needs its subject's run, or None."""
    if blacklisted:
        return None if state is not None and state.status == "blacklisted" else "blacklisted"
    if state is None:
        return "new"
    if state.status == "blacklisted":
        return None
    if state.reingest_requested:
        return "reingest"
    if state.content_hash != sha256:
        return "changed"
    if state.status == "retrying" and (
        state.next_attempt_at is None or state.next_attempt_at <= now
    ):
        return f"retry {state.attempts + 1}"
    if state.status == "quarantined" and released:
        return "released"
    return None


def pending_subjects(
    landed: Mapping[str, tuple[str, str]],
    states: Mapping[str, FileState],
    *,
    blacklist: Mapping[str, str],
    released: set[tuple[str, str]],
    reflected: Mapping[str, int | None],
    now: dt.datetime,
) -> list[PendingSubject]:
    """`landed`: path -> (subject, content hash) of every landed file. `blacklist`:
    source -> subject. `reflected`: subject -> the lowest raw version its derived
    tables reflect (None: never reconciled)."""
    reasons: dict[str, set[tuple[str, str]]] = {}
    for path, (subject, sha) in landed.items():
        why = file_reason(
            sha,
            states.get(path),
            blacklisted=path in blacklist,
            released=(path, sha) in released,
            now=now,
        )
        if why:
            reasons.setdefault(subject, set()).add((path, why))
    for source, subject in blacklist.items():
        state = states.get(source)
        if source not in landed and state is not None and state.status != "blacklisted":
            reasons.setdefault(subject, set()).add((source, "blacklisted"))
    markers: dict[str, list[int]] = {}
    for state in states.values():
        span = state.dirty_span
        if span is not None:
            markers.setdefault(state.subject_key, []).append(span.raw_version)
            seen = reflected.get(state.subject_key)
            if seen is None or span.raw_version > seen:
                reasons.setdefault(state.subject_key, set()).add(("*", "unreconciled"))
    return [
        PendingSubject(subject, tuple(sorted(why)), str(max(markers.get(subject, [-1]))))
        for subject, why in sorted(reasons.items())
    ]
