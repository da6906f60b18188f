"""The load manifest: Delta table `load_manifest`, one row per enriched run directory,
coordinating the shredder (`shredded_events`) and the loader (`warehouse_events`), after
the Snowplow loaders' manifest.

A run moves `NEW` -> `PROCESSED` -> `LOADED`. Every move is one MERGE on `run_id` whose
condition states the move's source state, so a move made twice, or raced by another run,
changes nothing the second time; a row flagged `to_skip` moves no further.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from resources import Lakehouse
from resources.lakehouse import WhenMatchedUpdate, WhenNotMatchedInsert
from resources.lakehouse.predicates import (
    And,
    Compare,
    Constant,
    IsTrue,
    Not,
    eq,
    from_source,
    is_in,
    matches,
)

LOAD_MANIFEST = "load_manifest"
NEW, PROCESSED, LOADED = "NEW", "PROCESSED", "LOADED"
SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string()),
        pa.field("state", pa.string()),
        pa.field("to_skip", pa.bool_()),
        pa.field("skip_reason", pa.string()),
        pa.field("added_at", pa.timestamp("us", tz="UTC")),
        pa.field("added_by", pa.string()),
        pa.field("processed_at", pa.timestamp("us", tz="UTC")),
        pa.field("processed_by", pa.string()),
        pa.field("event_types", pa.string()),
        pa.field("events", pa.int64()),
        pa.field("stage_path", pa.string()),
        pa.field("loaded_at", pa.timestamp("us", tz="UTC")),
        pa.field("loaded_by", pa.string()),
    ]
)
"""`event_types`: the types found, comma-separated in name order. `added_by`,
`processed_by`, `loaded_by`: the Dagster run that made the move."""


@dataclass(frozen=True)
class ManifestRow:
    run_id: str
    state: str
    to_skip: bool
    skip_reason: str | None
    event_types: tuple[str, ...]
    events: int | None
    stage_path: str | None
    added_at: dt.datetime
    processed_at: dt.datetime | None

    @property
    def state_since(self) -> dt.datetime:
        """When the run entered its current state (as far as the moves up to PROCESSED
        tell)."""
        return self.processed_at or self.added_at


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _ensure(lakehouse: Lakehouse, metadata: dict) -> None:
    lakehouse.create(LOAD_MANIFEST, SCHEMA, metadata=metadata)


def _rows(values: Sequence[dict]) -> pa.Table:
    columns = {name: [v.get(name) for v in values] for name in SCHEMA.names}
    return pa.Table.from_pydict(columns, schema=SCHEMA)


def read(
    lakehouse: Lakehouse, run_ids: Sequence[str] | None = None, *, states: Sequence[str] = ()
) -> dict[str, ManifestRow]:
    """The manifest's rows (of `run_ids`, or all; in `states`, or any), by run id."""
    if not lakehouse.exists(LOAD_MANIFEST):
        return {}
    parts = [] if run_ids is None else [is_in("run_id", sorted(run_ids))]
    parts += [is_in("state", list(states))] if states else []
    where = And(tuple(parts)) if parts else None
    rows = lakehouse.read_arrow(LOAD_MANIFEST, where=where).to_pylist()
    return {
        row["run_id"]: ManifestRow(
            run_id=row["run_id"],
            state=row["state"],
            to_skip=bool(row["to_skip"]),
            skip_reason=row["skip_reason"],
            event_types=tuple(filter(None, (row["event_types"] or "").split(","))),
            events=row["events"],
            stage_path=row["stage_path"],
            added_at=row["added_at"],
            processed_at=row["processed_at"],
        )
        for row in rows
    }


def add(lakehouse: Lakehouse, run_ids: Sequence[str], *, by: str, metadata: dict) -> None:
    """Rows in state NEW for runs the manifest does not hold yet."""
    _ensure(lakehouse, metadata)
    now = _now()
    new = _rows(
        [
            {"run_id": r, "state": NEW, "to_skip": False, "added_at": now, "added_by": by}
            for r in run_ids
        ]
    )
    lakehouse.merge(
        LOAD_MANIFEST,
        new,
        on=matches("run_id"),
        clauses=[WhenNotMatchedInsert()],
        metadata=metadata,
    )


def flag_to_skip(
    lakehouse: Lakehouse, run_id: str, *, reason: str, by: str, metadata: dict
) -> ManifestRow:
    """Flag a run `to_skip` (adding its row if the manifest has none yet); refused for a
    run already LOADED, whose rows are in the warehouse."""
    current = read(lakehouse, [run_id]).get(run_id)
    if current is not None and current.state == LOADED:
        raise ValueError(
            f"run {run_id} is already LOADED: flagging it to_skip would not take its events "
            "out of the warehouse"
        )
    _ensure(lakehouse, metadata)
    row = _rows(
        [
            {
                "run_id": run_id,
                "state": NEW,
                "to_skip": True,
                "skip_reason": reason,
                "added_at": _now(),
                "added_by": by,
            }
        ]
    )
    lakehouse.merge(
        LOAD_MANIFEST,
        row,
        on=matches("run_id"),
        clauses=[
            WhenMatchedUpdate(
                condition=Compare("t.state", "<>", LOADED),
                set=from_source(("to_skip", "skip_reason")),
            ),
            WhenNotMatchedInsert(),
        ],
        metadata=metadata,
    )
    return read(lakehouse, [run_id])[run_id]


@dataclass(frozen=True)
class StageFacts:
    """What the shredder staged of a run: the event count per type, and where."""

    run_id: str
    events_by_type: dict[str, int]
    stage_path: str

    @property
    def event_types(self) -> tuple[str, ...]:
        return tuple(sorted(self.events_by_type))


def mark_processed(
    lakehouse: Lakehouse, facts: Sequence[StageFacts], *, by: str, metadata: dict
) -> None:
    """NEW -> PROCESSED, with what was staged; rows flagged to_skip stay as they are."""
    now = _now()
    moved = _rows(
        [
            {
                "run_id": f.run_id,
                "processed_at": now,
                "processed_by": by,
                "event_types": ",".join(f.event_types),
                "events": sum(f.events_by_type.values()),
                "stage_path": f.stage_path,
            }
            for f in facts
        ]
    )
    lakehouse.merge(
        LOAD_MANIFEST,
        moved,
        on=matches("run_id"),
        clauses=[
            WhenMatchedUpdate(
                condition=eq("t.state", NEW) & Not(IsTrue("t.to_skip")),
                set={
                    "state": Constant(PROCESSED),
                    **from_source(
                        ("processed_at", "processed_by", "event_types", "events", "stage_path")
                    ),
                },
            )
        ],
        metadata=metadata,
    )


def mark_loaded(lakehouse: Lakehouse, run_ids: Sequence[str], *, by: str, metadata: dict) -> None:
    """PROCESSED -> LOADED."""
    moved = _rows([{"run_id": r, "loaded_at": _now(), "loaded_by": by} for r in run_ids])
    lakehouse.merge(
        LOAD_MANIFEST,
        moved,
        on=matches("run_id"),
        clauses=[
            WhenMatchedUpdate(
                condition=eq("t.state", PROCESSED) & Not(IsTrue("t.to_skip")),
                set={"state": Constant(LOADED), **from_source(("loaded_at", "loaded_by"))},
            )
        ],
        metadata=metadata,
    )
