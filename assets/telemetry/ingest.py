"""Ingesting one subject's pending file changes into `telemetry_raw`.

Per file, in one pass over the subject's landed files:
- size and mtime as recorded: not read at all; same content hash: nothing to do;
- new file: all complete lines; append (the ingested bytes are a prefix of the file):
  the tail, from `back_correction_window` before the previous end; anything else is a
  rewrite and replaces all of the file's rows; a half-written last line waits;
- a parse failure writes nothing of the file (its earlier rows stay) and is retried
  with backoff, then marked failed; other files go on;
- data ending more than the lateness horizon before the subject's newest data is
  quarantined until an operator releases it; blacklisted files lose their rows.

Changed files are parsed in this process, or on Spark's executors (TelemetrySettings.
compute): either way the run decides in this process, on the same facts. The run's
applied changes are one Delta commit, streamed a file at a time: it replaces
each file's rows from its first changed line, and its metadata carries the subject, the
kinds of change and the span they made dirty (each file's source, content hash and
outcome are in `telemetry_ingest_events`, with that commit's version). Every write of
the run advances the subject's app transaction on its table, so a concurrent, stale run
for the same subject is refused instead of overwriting newer rows.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from assets.source_files import Problem
from assets.telemetry import control
from assets.telemetry.control import Event, FileState, Quarantined
from assets.telemetry.reconcile import coalesce_span
from assets.telemetry.report_files import (
    ROWS_SCHEMA,
    FileChange,
    Parsed,
    ReportFileError,
    ReportRows,
    hashed_prefixes,
    parse_report,
    plan_change,
    unreadable,
)
from assets.telemetry.settings import LANDING_PREFIX, REPORT_SUFFIX, TelemetrySettings
from assets.telemetry.subjects import app_id, subject_of
from resources import Lakehouse, LandingZone
from resources.lakehouse import AppTransaction, Stream
from resources.lakehouse.predicates import Compare, any_of, eq, is_in
from resources.landing import FileStat

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class EmbeddedRows:
    """Changes parsed in this process as the run finds them, their rows parked in an Arrow
    file on local disk until the run has decided which changes apply (all files parsed:
    which are too late), then streamed into the raw table's commit: a run holds one
    file's rows at a time, however many files it ingests, and parses each once."""

    def __init__(self, directory: str, latest: dt.datetime) -> None:
        self.path = os.path.join(directory, "parked.arrow")
        self.latest = latest
        self._writer: pa.ipc.RecordBatchFileWriter | None = None
        self._batches = 0
        self._outcomes: list[tuple[Planned, Parsed | list[Problem]]] = []
        self._parked: dict[str, range] = {}

    def add(self, planned: Planned, content: bytes) -> None:
        change = planned.change
        try:
            rows = parse_report(
                planned.stat.path,
                content[change.from_byte : change.end_byte],
                first_line=change.from_line,
                expect_header=change.expect_header,
                latest=self.latest,
            )
        except ReportFileError as error:
            self._outcomes.append((planned, error.problems))
            return
        self._outcomes.append((planned, Parsed.of(rows, planned.old_lines)))
        self._parked[planned.stat.path] = self._park(rows)

    def _park(self, rows: ReportRows) -> range:
        if self._writer is None:
            self._writer = pa.ipc.new_file(self.path, ROWS_SCHEMA)
        first = self._batches
        for batch in rows.table.to_batches():
            self._writer.write_batch(batch)
            self._batches += 1
        return range(first, self._batches)

    def parsed(self) -> list[tuple[Planned, Parsed | list[Problem]]]:
        """Each change added, in order, with its rows' facts or the problems of its file."""
        if self._writer is not None:
            self._writer.close()
        return self._outcomes

    def rows(self, subject: str, applied: Sequence[Planned]) -> Stream:
        """The rows of the `applied` changes, a batch at a time, from one opening of the
        parked file (its footer lists every batch of the run)."""

        def batches() -> Iterator[pa.RecordBatch]:
            with pa.OSFile(self.path) as file:
                reader = pa.ipc.open_file(file)
                for change in applied:
                    source = change.stat.path
                    for i in self._parked[source]:
                        rows = ReportRows(source, pa.Table.from_batches([reader.get_batch(i)]))
                        yield from rows.to_arrow(subject, control.RAW_SCHEMA).to_batches()

        return Stream.of(control.RAW_SCHEMA, batches)


class ChangedRows(Protocol):
    """Where a run's changes are parsed and their rows held until its commit: in this
    process (EmbeddedRows), or on Spark's executors (on_spark.SparkRows)."""

    def add(self, planned: Planned, content: bytes) -> None: ...

    def parsed(self) -> list[tuple[Planned, Parsed | list[Problem]]]: ...

    def rows(self, subject: str, applied: Sequence[Planned]) -> Stream | DataFrame: ...


class SubjectPathError(ValueError):
    """A subject key that cannot name a folder of the landing zone."""


def subject_files(
    landing: LandingZone, settings: TelemetrySettings, subject_key: str
) -> list[FileStat]:
    """The landed report files of one subject."""
    if settings.subject_rule == "folder":
        if subject_key in (".", "..") or "/" in subject_key or "\\" in subject_key:
            raise SubjectPathError(
                f"subject key {subject_key!r} cannot be a folder under {LANDING_PREFIX}/"
            )
        return landing.list(
            f"{LANDING_PREFIX}/{subject_key}", suffix=REPORT_SUFFIX, recursive=False
        )
    return [
        stat
        for stat in landing.list(LANDING_PREFIX, suffix=REPORT_SUFFIX)
        if subject_of(stat.path, settings, partial(landing.head, stat.path)) == subject_key
    ]


@dataclass(frozen=True)
class Planned:
    """A file change found and planned (which lines to ingest), not yet parsed."""

    state: FileState | None
    stat: FileStat
    content_hash: str
    change: FileChange
    reingest: bool
    old_lines: int
    """The change's lines up to this number were ingested before (an append's re-read
    part); 0 for any other change."""


@dataclass(frozen=True)
class Candidate(Planned):
    """A file change parsed and ready to apply (or to quarantine)."""

    start: dt.datetime | None
    end: dt.datetime | None
    """The span of its rows' data."""
    row_count: int
    replaced_lines: int
    """Of its rows, how many replace lines ingested before."""

    @classmethod
    def of(cls, planned: Planned, parsed: Parsed) -> Candidate:
        facts = {f.name: getattr(planned, f.name) for f in fields(Planned)}
        return cls(**facts, **{f.name: getattr(parsed, f.name) for f in fields(Parsed)})


@dataclass
class IngestReport:
    applied: dict[str, int] = field(default_factory=dict)
    """source -> rows written."""
    kinds: dict[str, str] = field(default_factory=dict)
    failed: list[Problem] = field(default_factory=list)
    retrying: list[Problem] = field(default_factory=list)
    quarantined: list[Quarantined] = field(default_factory=list)
    removed: dict[str, int] = field(default_factory=dict)
    """Blacklisted source -> rows removed."""
    unchanged: int = 0
    raw_version: int | None = None
    states: dict[str, FileState] = field(default_factory=dict)
    """Every file of the subject as this run left it."""
    open_quarantine: list[Quarantined] = field(default_factory=list)
    """Files held in quarantine after this run (earlier ones and new ones)."""

    @property
    def rows_written(self) -> int:
        return sum(self.applied.values())


class SubjectIngest:
    """One run's ingest of one subject. `commit_metadata(**facts)` builds the Delta commit
    metadata of a write (run id, asset, partition + facts)."""

    def __init__(
        self,
        *,
        lakehouse: Lakehouse,
        landing: LandingZone,
        settings: TelemetrySettings,
        subject_key: str,
        run_id: str,
        commit_metadata: Callable[..., dict[str, Any]],
        now: dt.datetime,
        spark: Lakehouse | None = None,
    ) -> None:
        self.lakehouse = lakehouse
        self.landing = landing
        self.settings = settings
        self.subject = subject_key
        self.run_id = run_id
        self.meta = commit_metadata
        self.now = now
        self.spark = spark
        """The lakehouse through delta-spark when the changes are parsed and written on
        Spark (TelemetrySettings.compute); None: in this process."""
        self.report = IngestReport()
        self.states: dict[str, FileState] = {}
        self.updated: dict[str, FileState] = {}
        self.events: list[Event] = []
        self.handled_reingests: set[str] = set()
        self.app_id = app_id(subject_key)

    # -- the run ------------------------------------------------------------------------

    def run(self) -> IngestReport:
        for table in (control.RAW, control.FILE_STATE, control.EVENTS, control.QUARANTINE):
            control.ensure_table(self.lakehouse, table, self.meta())
        self.states = control.file_states(self.lakehouse, self.subject)
        quarantine = control.quarantine_entries(self.lakehouse, self.subject)
        released = control.released(quarantine)
        self.reconciled = control.reconciled_versions(self.lakehouse, [self.subject])[self.subject]
        self.raw_sequence = self.lakehouse.app_transaction_version(control.RAW, self.app_id) or 0
        state_sequence = self.lakehouse.app_transaction_version(control.FILE_STATE, self.app_id)

        blacklist = control.blacklisted(self.lakehouse, self.subject)
        for source, reason in sorted(blacklist.items()):
            self._remove_blacklisted(source, reason)
        with self._changed_rows() as rows:
            self._apply_changes(rows, blacklist, released)

        control.save_file_states(
            self.lakehouse,
            list(self.updated.values()),
            handled_reingests=self.handled_reingests,
            metadata=self.meta(files=len(self.updated)),
            app_transaction=AppTransaction(self.app_id, (state_sequence or 0) + 1),
        )
        control.add_quarantine(self.lakehouse, self.report.quarantined, self.meta())
        control.log_events(self.lakehouse, self.events, self.meta())
        self.report.states = self.states
        self.report.open_quarantine = [
            *control.open_quarantine(quarantine),
            *self.report.quarantined,
        ]
        return self.report

    @contextmanager
    def _changed_rows(self) -> Iterator[ChangedRows]:
        latest = self.now + self.settings.max_future_skew
        if self.spark is not None:
            from assets.telemetry.on_spark import SparkRows

            yield SparkRows(self.spark, self.landing, latest)
            return
        with tempfile.TemporaryDirectory(prefix="telemetry-ingest-") as parking:
            yield EmbeddedRows(parking, latest)

    def _apply_changes(
        self, rows: ChangedRows, blacklist: Mapping[str, str], released: set[tuple[str, str]]
    ) -> None:
        """Plan and parse every changed file, decide which are too late, and write the
        others in one commit."""
        for stat in subject_files(self.landing, self.settings, self.subject):
            if stat.path not in blacklist:
                self._plan(stat, released, rows)
        candidates = []
        for planned, outcome in rows.parsed():
            if isinstance(outcome, Parsed):
                candidates.append(Candidate.of(planned, outcome))
            else:
                self._fail(planned.state, planned.stat, planned.content_hash, outcome)
        newest = self._newest(candidates)
        applied = []
        for candidate in candidates:
            key = (candidate.stat.path, candidate.content_hash)
            too_late = (
                newest is not None
                and candidate.end is not None
                and newest - candidate.end > self.settings.lateness_horizon
            )
            if too_late and newest is not None and key not in released:
                self._quarantine(candidate, newest)
            else:
                applied.append(candidate)
        if applied:
            version = self._write_changes(rows, applied)
            for candidate in applied:
                self._applied(candidate, version)

    # -- deciding -----------------------------------------------------------------------

    def _plan(self, stat: FileStat, released: set[tuple[str, str]], rows: ChangedRows) -> None:
        """Read a landed file and, if it changed, add the change to `rows` to be parsed."""
        state = self.states.get(stat.path)
        due = (
            state is not None
            and state.status == "retrying"
            and (state.next_attempt_at is None or state.next_attempt_at <= self.now)
        )
        reingest = state is not None and state.reingest_requested
        if (
            state is not None
            and state.size == stat.size
            and state.mtime_ns == stat.mtime_ns
            and not (due or reingest or state.status == "quarantined")
        ):
            self.report.unchanged += 1
            return
        ingested_bytes = state.ingested_bytes if state and not reingest else 0
        try:
            landed = self.landing.read(stat.path, prefixes=hashed_prefixes(ingested_bytes))
        except OSError as error:
            # Gone since the listing, or unreadable: recorded against this file alone
            # (retried, then failed); the subject's other files flow.
            unread = state.content_hash if state else ""
            self._fail(state, stat, unread, [Problem(stat.path, None, unreadable(error))])
            return
        content, content_hash = landed.content, landed.fingerprint.sha256
        stat = FileStat(stat.path, landed.fingerprint.size, landed.fingerprint.mtime_ns)
        # An operator released exactly this content from quarantine: apply it now.
        release = (
            state is not None
            and state.status == "quarantined"
            and ((stat.path, content_hash) in released)
        )
        if (
            state is not None
            and state.content_hash == content_hash
            and not (due or reingest or release)
        ):
            if (state.size, state.mtime_ns) != (stat.size, stat.mtime_ns):
                self._save(replace(state, mtime_ns=stat.mtime_ns, last_seen=self.now))
            self.report.unchanged += 1
            return
        if not content:
            self._fail(
                state, stat, content_hash, [Problem(stat.path, None, "empty file: no header line")]
            )
            return
        change = plan_change(
            source=stat.path,
            content=content,
            ingested_bytes=ingested_bytes,
            ingested_hash=state.ingested_hash if state and not reingest else None,
            logical_end=state.logical_end if state else None,
            window=self.settings.back_correction_window,
            prefix_sha256=landed.prefix_sha256,
            force_rewrite=reingest,
        )
        if change is None:  # only a half-written line so far
            self._save(
                self._seen(
                    state, stat, content_hash, status="waiting" if state is None else state.status
                )
            )
            return
        old_lines = 0
        if change.kind == "append" and state is not None:
            # Lines ingested before: those before the re-read part, plus its old lines.
            old_lines = change.from_line - 1
            old_lines += content.count(b"\n", change.from_byte, state.ingested_bytes)
        rows.add(Planned(state, stat, content_hash, change, reingest, old_lines), content)

    def _newest(self, candidates: list[Candidate]) -> dt.datetime | None:
        """The subject's newest data: over ingested files and this run's changes, so the
        order files are handled in within a run never changes what is quarantined."""
        ends = [
            s.logical_end
            for s in self.states.values()
            if s.status == "ingested" and s.logical_end is not None
        ]
        ends += [c.end for c in candidates if c.end is not None]
        return max(ends) if ends else None

    # -- acting -------------------------------------------------------------------------

    def _next_raw_transaction(self) -> AppTransaction:
        # Telemetry numbers its own app transactions rather than go through the
        # Transactional Writer: a subject's input is the changes of its files since the
        # last run, not a fixed set of files per partition, so each commit to the raw
        # table takes the subject's next number and a stale run's commit is refused.
        self.raw_sequence += 1
        return AppTransaction(self.app_id, self.raw_sequence)

    def _replace_rows(self, source: str, from_line: int, rows: pa.Table, **facts: Any) -> int:
        where = (
            eq("subject_key", self.subject)
            & eq("source", source)
            & Compare("line", ">=", from_line)
        )
        result = self.lakehouse.overwrite(
            control.RAW,
            rows,
            where=where,
            metadata=self.meta(subject_key=self.subject, source=source, **facts),
            app_transaction=self._next_raw_transaction(),
        )
        self.report.raw_version = result.version
        return result.version

    def _write_changes(self, rows: ChangedRows, changes: list[Candidate]) -> int:
        """One commit for every applied change of the run: each file's rows from its first
        changed line are replaced by the change's rows (streamed a file at a time, or
        written by Spark's executors)."""
        whole = [c.stat.path for c in changes if c.change.from_line == 1]
        tails = [
            eq("source", c.stat.path) & Compare("line", ">=", c.change.from_line)
            for c in changes
            if c.change.from_line > 1
        ]
        replaced = any_of([*([is_in("source", whole)] if whole else []), *tails])
        spans = [span for c in changes if (span := _dirty(c)) is not None]

        result = (self.spark or self.lakehouse).overwrite(
            control.RAW,
            rows.rows(self.subject, changes),
            where=eq("subject_key", self.subject) & replaced,
            metadata=self.meta(
                subject_key=self.subject,
                files=len(changes),
                changes=dict(Counter(c.change.kind for c in changes)),
                dirty_start=min(a for a, _ in spans).isoformat() if spans else None,
                dirty_end=max(b for _, b in spans).isoformat() if spans else None,
            ),
            app_transaction=self._next_raw_transaction(),
        )
        self.report.raw_version = result.version
        return result.version

    def _applied(self, c: Candidate, version: int) -> None:
        old = c.state
        if c.change.kind == "append" and old is not None:
            row_count = old.rows - c.replaced_lines + c.row_count
            starts = [t for t in (old.logical_start, c.start) if t is not None]
            ends = [t for t in (old.logical_end, c.end) if t is not None]
        else:
            row_count = c.row_count
            starts = [t for t in (c.start,) if t is not None]
            ends = [t for t in (c.end,) if t is not None]
        state = FileState(
            source=c.stat.path,
            subject_key=self.subject,
            content_hash=c.content_hash,
            size=c.stat.size,
            mtime_ns=c.stat.mtime_ns,
            ingested_bytes=c.change.end_byte,
            ingested_hash=c.change.end_hash,
            logical_start=min(starts) if starts else None,
            logical_end=max(ends) if ends else None,
            rows=row_count,
            process_count=(old.process_count if old else 0) + 1,
            status="ingested",
            attempts=0,
            last_error=None,
            next_attempt_at=None,
            last_seen=self.now,
            raw_version=old.raw_version if old else None,
            dirty_start=old.dirty_start if old else None,
            dirty_end=old.dirty_end if old else None,
        )
        dirty = _dirty(c)
        if dirty:
            span = coalesce_span(
                old.dirty_span if old else None, *dirty, version, reconciled_version=self.reconciled
            )
            state = state.with_span(span)
        self._save(state)
        if c.reingest:
            self.handled_reingests.add(c.stat.path)
        self.report.applied[c.stat.path] = c.row_count
        self.report.kinds[c.stat.path] = "reingest" if c.reingest else c.change.kind
        self._event(
            c.stat.path,
            "reingest" if c.reingest else c.change.kind,
            c.content_hash,
            rows_written=c.row_count,
            raw_version=version,
            detail=f"lines {c.change.from_line}+ replaced",
        )

    def _remove_blacklisted(self, source: str, reason: str) -> None:
        state = self.states.get(source)
        if state is not None and state.status == "blacklisted":
            return
        if state is None:
            if not self.landing.exists(source):
                return
            landed = self.landing.read(source)
            stat = FileStat(source, landed.fingerprint.size, landed.fingerprint.mtime_ns)
            self._save(self._seen(None, stat, landed.fingerprint.sha256, status="blacklisted"))
            self._event(source, "blacklisted", landed.fingerprint.sha256, detail=reason)
            return
        version = self._replace_rows(
            source, 1, control.RAW_SCHEMA.empty_table(), change="blacklist", reason=reason
        )
        removed = replace(state, status="blacklisted", rows=0, last_seen=self.now)
        if state.logical_start is not None and state.logical_end is not None:
            removed = removed.with_span(
                coalesce_span(
                    state.dirty_span,
                    state.logical_start,
                    state.logical_end,
                    version,
                    reconciled_version=self.reconciled,
                )
            )
        self._save(removed)
        self.report.removed[source] = state.rows
        self._event(source, "blacklisted", state.content_hash, raw_version=version, detail=reason)

    def _quarantine(self, c: Candidate, newest: dt.datetime) -> None:
        data_end = c.end
        assert data_end is not None
        reason = (
            f"data ends {data_end.isoformat()}, {newest - data_end} before the subject's "
            f"newest data ({newest.isoformat()}); lateness horizon is "
            f"{self.settings.lateness_horizon}"
        )
        entry = Quarantined(
            source=c.stat.path,
            subject_key=self.subject,
            content_hash=c.content_hash,
            reason=reason,
            data_end=data_end,
            subject_newest=newest,
            quarantined_at=self.now,
        )
        self.report.quarantined.append(entry)
        self._save(self._seen(c.state, c.stat, c.content_hash, status="quarantined"))
        self._event(c.stat.path, "quarantined", c.content_hash, detail=reason)

    def _fail(
        self, state: FileState | None, stat: FileStat, content_hash: str, problems: list[Problem]
    ) -> None:
        same_content = state is not None and state.content_hash == content_hash
        attempts = (state.attempts if same_content and state else 0) + 1
        failed = attempts >= self.settings.max_parse_attempts
        error = "; ".join(str(p) for p in problems)
        seen = self._seen(state, stat, content_hash, status="failed" if failed else "retrying")
        self._save(
            replace(
                seen,
                attempts=attempts,
                last_error=error,
                next_attempt_at=None if failed else self.now + self.settings.retry_delay(attempts),
            )
        )
        (self.report.failed if failed else self.report.retrying).extend(problems)
        self._event(
            stat.path,
            "failed" if failed else "retrying",
            content_hash,
            detail=f"attempt {attempts} of {self.settings.max_parse_attempts}: {error}",
        )

    # -- bookkeeping --------------------------------------------------------------------

    def _seen(
        self,
        state: FileState | None,
        stat: FileStat,
        content_hash: str,
        *,
        status: control.Status,
    ) -> FileState:
        """The state after seeing new content without applying it: what was ingested
        before stays as it was."""
        if state is None:
            state = FileState(
                source=stat.path,
                subject_key=self.subject,
                content_hash=content_hash,
                size=stat.size,
                mtime_ns=stat.mtime_ns,
                ingested_bytes=0,
                ingested_hash=None,
                logical_start=None,
                logical_end=None,
                rows=0,
                process_count=0,
                status=status,
                attempts=0,
                last_error=None,
                next_attempt_at=None,
                last_seen=self.now,
                raw_version=None,
                dirty_start=None,
                dirty_end=None,
            )
        return replace(
            state,
            content_hash=content_hash,
            size=stat.size,
            mtime_ns=stat.mtime_ns,
            status=status,
            last_seen=self.now,
        )

    def _save(self, state: FileState) -> None:
        self.updated[state.source] = state
        self.states[state.source] = state

    def _event(
        self,
        source: str,
        action: str,
        content_hash: str | None,
        *,
        rows_written: int = 0,
        raw_version: int | None = None,
        detail: str | None = None,
    ) -> None:
        self.events.append(
            Event(
                self.now,
                self.run_id,
                self.subject,
                source,
                action,
                content_hash,
                rows_written,
                raw_version,
                detail,
            )
        )


def _dirty(c: Candidate) -> tuple[dt.datetime, dt.datetime] | None:
    """The span a change makes dirty: the rows it replaces or adds; a rewrite also removes
    the old rows' whole span."""
    points = [t for t in (c.start, c.end) if t is not None]
    if c.change.kind == "rewrite" and c.state is not None:
        points += [t for t in (c.state.logical_start, c.state.logical_end) if t is not None]
    return (min(points), max(points)) if points else None


def metadata_lists(report: IngestReport) -> Mapping[str, Any]:
    return {
        "failed_files": [str(p) for p in report.failed],
        "retrying_files": [str(p) for p in report.retrying],
        "quarantined_files": [f"{q.source}: {q.reason}" for q in report.quarantined],
    }
