"""The corpus as a whole: at least 50 cases, every class of bad input in it, every source."""

from __future__ import annotations

from bad_input import (
    test_change_files,
    test_enriched_runs,
    test_events,
    test_payments,
    test_telemetry,
    test_visits,
)
from bad_input.corpus import KINDS

SOURCES = {
    "visits": test_visits.CASES,
    "devices": [*test_change_files.DEVICE_LINES, *test_change_files.DEVICE_FILES],
    "device_catalog": [*test_change_files.CATALOG_LINES, *test_change_files.CATALOG_FILES],
    "telemetry": test_telemetry.CASES,
    "payments": [*test_payments.LINES, *test_payments.FILES],
    "events": [*test_events.LINES, *test_events.FILES, *test_events.OUT_OF_BOUNDS],
    "enriched runs": [*test_enriched_runs.LINES, *test_enriched_runs.FILES],
}


def test_the_corpus_covers_every_source_and_every_class():
    cases = [case for source in SOURCES.values() for case in source]
    assert len(cases) >= 50, len(cases)
    assert {case.kind for case in cases} == set(KINDS)
    for name, source in SOURCES.items():
        assert len(source) >= 6, name
        assert len({case.name for case in source}) == len(source), name
