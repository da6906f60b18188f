"""Subject keys and the sensor's pending-work decision (pure)."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from assets.telemetry import TelemetrySettings
from assets.telemetry.control import FileState
from assets.telemetry.pending import PendingIndex, file_reason, pending_subjects
from assets.telemetry.subjects import partition_key_problem, subject_of

NOW = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)


@pytest.mark.parametrize("key", ["Tool01", "Tool 'x\"", "Prüfstand ß", "工具", "a,b|[c]"])
def test_arbitrary_folder_names_are_partition_keys(key):
    assert partition_key_problem(key) is None


@pytest.mark.parametrize("key, why", [("a...b", "'...'"), ("a\tb", "control"), (" ", "empty")])
def test_keys_dagster_cannot_hold_are_named(key, why):
    assert why in partition_key_problem(key)


def test_subject_rules_are_pluggable():
    folder = TelemetrySettings()
    assert subject_of("telemetry/Tool 7/x.csv", folder, bytes) == "Tool 7"
    assert subject_of("telemetry/x.csv", folder, bytes) is None
    # The layout is telemetry/<subject>/<file>: deeper files belong to no subject.
    assert subject_of("telemetry/Tool 7/sub/x.csv", folder, bytes) is None
    by_name = TelemetrySettings(subject_rule="file_name")
    assert subject_of("telemetry/in/Tool07_2024.csv", by_name, bytes) == "Tool07"
    by_header = TelemetrySettings(subject_rule="header")
    assert (
        subject_of("telemetry/x.csv", by_header, lambda: b"# subject: Tool 9\nts,...") == "Tool 9"
    )


def state(**changes) -> FileState:
    base = dict(
        source="p",
        subject_key="s",
        content_hash="h",
        size=1,
        mtime_ns=1,
        ingested_bytes=1,
        ingested_hash="h",
        logical_start=None,
        logical_end=None,
        rows=0,
        process_count=1,
        status="ingested",
        attempts=0,
        last_error=None,
        next_attempt_at=None,
        last_seen=NOW,
        raw_version=None,
        dirty_start=None,
        dirty_end=None,
    )
    return FileState(**{**base, **changes})


def test_pending_reasons():
    def reason(sha, st, **kw):
        return file_reason(sha, st, **{"blacklisted": False, "released": False, "now": NOW, **kw})

    assert reason("h", None) == "new"
    assert reason("h", state()) is None  # unchanged: nothing
    assert reason("h2", state()) == "changed"
    assert reason("h", state(status="failed")) is None  # failed stays failed until it changes
    later = NOW + dt.timedelta(minutes=1)
    assert reason("h", state(status="retrying", attempts=1, next_attempt_at=later)) is None
    assert reason("h", state(status="retrying", attempts=1, next_attempt_at=NOW)) == "retry 2"
    assert reason("h", state(status="quarantined")) is None
    assert reason("h", state(status="quarantined"), released=True) == "released"
    assert reason("h", state(), blacklisted=True) == "blacklisted"
    assert reason("h", state(status="blacklisted"), blacklisted=True) is None


def put(facts: dict, key, value) -> None:
    """Set `key` to `value` in the facts told from scratch (None: remove it)."""
    if value is None:
        facts.pop(key, None)
    else:
        facts[key] = value


@pytest.mark.parametrize("seed", range(5))
def test_the_index_kept_fact_by_fact_decides_as_a_decision_from_scratch(seed):
    """The sensor keeps its decision from tick to tick, changing only the facts that
    moved. Random landings, states (retries falling due, spans moving back), blacklists,
    releases and reflected versions, over many ticks: after each, the kept index asks for
    exactly the runs a decision made from every fact would."""
    rng = random.Random(seed)
    sources = [f"telemetry/T{n % 3}/f{n}.csv" for n in range(12)]
    index = PendingIndex()
    landed: dict[str, tuple[str, str]] = {}
    states: dict[str, FileState] = {}
    blacklist: dict[str, str] = {}
    released: set[tuple[str, str]] = set()
    now = NOW
    for _ in range(300):
        source = rng.choice(sources)
        subject = source.split("/")[1]
        match rng.randrange(5):
            case 0:
                landed_as = (subject, rng.choice("hk")) if rng.random() < 0.8 else None
                index.land(source, landed_as)
                put(landed, source, landed_as)
            case 1:
                new_state = None
                if rng.random() < 0.9:
                    version = rng.choice([None, *range(6)])
                    new_state = state(
                        source=source,
                        subject_key=subject,
                        content_hash=rng.choice("hk"),
                        status=rng.choice(
                            ["ingested", "retrying", "failed", "quarantined", "blacklisted"]
                        ),
                        attempts=rng.randrange(3),
                        next_attempt_at=now + dt.timedelta(minutes=rng.randrange(-2, 4)),
                        reingest_requested=rng.random() < 0.1,
                        raw_version=version,
                        dirty_start=None if version is None else NOW,
                        dirty_end=None if version is None else NOW,
                    )
                index.set_state(source, new_state)
                put(states, source, new_state)
            case 2:
                listed = subject if rng.random() < 0.5 else None
                index.set_blacklisted(source, listed)
                put(blacklist, source, listed)
            case 3:
                pair, is_released = (source, rng.choice("hk")), rng.random() < 0.5
                index.set_released(*pair, is_released)
                (released.add if is_released else released.discard)(pair)
            case 4:
                now += dt.timedelta(minutes=1)
        reflected = {f"T{n}": rng.choice([None, *range(6)]) for n in range(3)}
        scratch = pending_subjects(
            landed, states, blacklist=blacklist, released=released, reflected=reflected, now=now
        )
        assert index.pending(reflected, now) == scratch
