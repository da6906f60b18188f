"""Which subjects have pending work: the sensor's decision, from fingerprints and the
control tables alone (no data is read).

The decision is kept up to date file by file (`PendingIndex`): a landed file, a file
state, a blacklist entry or a release that changed re-decides that one file, so a tick
among 100,000 known files costs the files that changed, not every file."""

import datetime as dt
import hashlib
from collections.abc import Iterable, Mapping
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


class PendingIndex:
    """The facts the decision rests on, and each file's reason, kept up to date by the
    setters; `pending` re-decides only the files whose facts changed since it last ran
    (and retries that fell due)."""

    def __init__(self) -> None:
        self._landed: dict[str, tuple[str, str]] = {}
        self._landed_per_subject: dict[str, int] = {}
        self._states: dict[str, FileState] = {}
        self._blacklist: dict[str, str] = {}
        self._released: set[tuple[str, str]] = set()
        self._reason_of: dict[str, tuple[str, str]] = {}
        """source -> (subject, why) of every file with a reason."""
        self._reasons: dict[str, dict[str, str]] = {}
        """subject -> source -> why."""
        self._retry_at: dict[str, dt.datetime] = {}
        """Retrying landed files whose next attempt was still ahead when decided."""
        self._spans: dict[str, dict[str, int]] = {}
        """subject -> source -> the raw version of the file's dirty span."""
        self._newest_span: dict[str, int] = {}
        self._undecided: set[str] = set()

    # -- the facts ----------------------------------------------------------------------

    def land(self, path: str, landed: tuple[str, str] | None) -> None:
        """`path` landed as (subject, content hash), or is gone (None)."""
        before = self._landed.pop(path, None)
        if before is not None:
            self._count(before[0], -1)
        if landed is not None:
            self._landed[path] = landed
            self._count(landed[0], 1)
        if before != landed:
            self._undecided.add(path)

    def set_state(self, source: str, state: FileState | None) -> None:
        before = self._states.pop(source, None)
        if state is not None:
            self._states[source] = state
        if before == state:
            return
        old = None if before is None else before.dirty_span
        new = None if state is None else state.dirty_span
        if (
            before is not None
            and old is not None
            and (new is None or state is None or state.subject_key != before.subject_key)
        ):
            self._set_span(before.subject_key, source, None)
        if state is not None and new is not None:
            self._set_span(state.subject_key, source, new.raw_version)
        self._undecided.add(source)

    def set_blacklisted(self, source: str, subject_key: str | None) -> None:
        if self._blacklist.get(source) != subject_key:
            if subject_key is None:
                del self._blacklist[source]
            else:
                self._blacklist[source] = subject_key
            self._undecided.add(source)

    def set_released(self, source: str, content_hash: str, released: bool) -> None:
        pair = (source, content_hash)
        if (pair in self._released) != released:
            (self._released.add if released else self._released.discard)(pair)
            self._undecided.add(source)

    # -- what the facts say -------------------------------------------------------------

    def landed_paths(self) -> set[str]:
        return set(self._landed)

    def has_landed(self, subject_key: str) -> bool:
        """Whether any landed file belongs to the subject."""
        return subject_key in self._landed_per_subject

    @property
    def states(self) -> Mapping[str, FileState]:
        return self._states

    @property
    def blacklist(self) -> Mapping[str, str]:
        return self._blacklist

    @property
    def released(self) -> set[tuple[str, str]]:
        return self._released

    def subjects_with_spans(self) -> Iterable[str]:
        """Subjects whose derived tables have raw versions to reflect."""
        return self._newest_span.keys()

    def pending(
        self, reflected: Mapping[str, int | None], now: dt.datetime
    ) -> list[PendingSubject]:
        """The subjects with work, given `reflected`: subject -> the lowest raw version its
        derived tables reflect (None: never reconciled), for every subject with spans."""
        due = [source for source, at in self._retry_at.items() if at <= now]
        for source in (*self._undecided, *due):
            self._decide(source, now)
        self._undecided.clear()
        reasons = {subject: set(whys.items()) for subject, whys in self._reasons.items()}
        for subject, newest in self._newest_span.items():
            seen = reflected.get(subject)
            if seen is None or newest > seen:
                reasons.setdefault(subject, set()).add(("*", "unreconciled"))
        return [
            PendingSubject(subject, tuple(sorted(why)), str(self._newest_span.get(subject, -1)))
            for subject, why in sorted(reasons.items())
        ]

    # -- bookkeeping --------------------------------------------------------------------

    def _decide(self, source: str, now: dt.datetime) -> None:
        state = self._states.get(source)
        landed = self._landed.get(source)
        self._retry_at.pop(source, None)
        decided: tuple[str, str] | None = None
        if landed is not None:
            subject, sha = landed
            why = file_reason(
                sha,
                state,
                blacklisted=source in self._blacklist,
                released=(source, sha) in self._released,
                now=now,
            )
            decided = (subject, why) if why else None
            if (
                why is None
                and state is not None
                and state.status == "retrying"
                and state.next_attempt_at is not None
            ):
                # Not due yet (file_reason would have named it): decided again once it is.
                self._retry_at[source] = state.next_attempt_at
        elif (
            (listed_for := self._blacklist.get(source)) is not None
            and state is not None
            and state.status != "blacklisted"
        ):
            decided = (listed_for, "blacklisted")
        before = self._reason_of.pop(source, None)
        if before is not None:
            whys = self._reasons[before[0]]
            del whys[source]
            if not whys:
                del self._reasons[before[0]]
        if decided is not None:
            self._reason_of[source] = decided
            self._reasons.setdefault(decided[0], {})[source] = decided[1]

    def _count(self, subject_key: str, step: int) -> None:
        count = self._landed_per_subject.get(subject_key, 0) + step
        if count:
            self._landed_per_subject[subject_key] = count
        else:
            del self._landed_per_subject[subject_key]

    def _set_span(self, subject_key: str, source: str, raw_version: int | None) -> None:
        """The file's dirty span is at `raw_version` (None: it has none)."""
        spans = self._spans.setdefault(subject_key, {})
        old = spans.pop(source, None)
        if raw_version is not None:
            spans[source] = raw_version
            if raw_version >= self._newest_span.get(subject_key, -1):
                self._newest_span[subject_key] = raw_version
                return
        if not spans:
            del self._spans[subject_key]
            self._newest_span.pop(subject_key, None)
        elif old is not None and old == self._newest_span[subject_key]:
            # Raw versions only grow as files are ingested again, so the newest span
            # rarely moves back: the subject's spans are looked over again only then.
            self._newest_span[subject_key] = max(spans.values())


def pending_subjects(
    landed: Mapping[str, tuple[str, str]],
    states: Mapping[str, FileState],
    *,
    blacklist: Mapping[str, str],
    released: set[tuple[str, str]],
    reflected: Mapping[str, int | None],
    now: dt.datetime,
) -> list[PendingSubject]:
    """The decision from scratch. `landed`: path -> (subject, content hash) of every
    landed file. `blacklist`: source -> subject. `reflected`: subject -> the lowest raw
    version its derived tables reflect (None: never reconciled)."""
    index = PendingIndex()
    for path, subject_and_hash in landed.items():
        index.land(path, subject_and_hash)
    for source, state in states.items():
        index.set_state(source, state)
    for source, subject_key in blacklist.items():
        index.set_blacklisted(source, subject_key)
    for source, content_hash in released:
        index.set_released(source, content_hash, True)
    return index.pending(reflected, now)
