"""Whose sessions a rebuild redoes: a few users by name, or every user of some days.

The two differ in how they are read and held, and only here: a few named users are
pushed into every read as a predicate, and what is computed for them is small, so it
comes to this process and goes on as a local relation (Spark plans it without a job).
Every user of a day stays on the executors: reads are semi-joined with them, and what is
computed for them is checkpointed there.
"""

import datetime as dt
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from resources import Lakehouse
from resources.lakehouse.predicates import And, Predicate, is_in

MAX_NAMED_USERS = 1_000
"""Up to this many changed users are pushed into the reads by name."""
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

Span = tuple[dt.datetime | None, dt.datetime | None, str | None]
"""Sessions' earliest start and latest end widened by the gap (None: no sessions), and a
visit without a first-seen time among them, if any."""


def instant(micros: int) -> dt.datetime:
    return EPOCH + dt.timedelta(microseconds=micros)


@dataclass(frozen=True)
class Pinned:
    """A frame computed once, so the widening loop, the retired ids and the MERGE all use
    one result; `rows`: its rows in this process, when they were brought here."""

    frame: DataFrame
    rows: pa.Table | None

    def span(self, gap: dt.timedelta) -> Span:
        """The sessions' span widened by `gap`, and a visit without a first-seen time."""
        # Bounds as epoch microseconds: Spark hands timestamps to Python in its local zone.
        if self.rows is None:
            unseen = (
                F.min("_unseen_visit") if "_unseen_visit" in self.frame.columns else F.lit(None)
            )
            low, high, missing = self.frame.agg(
                F.min(F.unix_micros("session_start")), F.max(F.unix_micros("session_end")), unseen
            ).collect()[0]
        else:
            low, high = (
                pc.min(pc.cast(self.rows.column(name), pa.int64())).as_py()
                for name in ("session_start", "session_end")
            )
            missing = (
                pc.min(self.rows.column("_unseen_visit")).as_py()
                if "_unseen_visit" in self.rows.column_names
                else None
            )
        return (
            None if low is None else instant(low) - gap,
            None if high is None else instant(high) + gap,
            missing,
        )


@dataclass(frozen=True)
class NamedUsers:
    """A few users, by name."""

    names: list[str]

    def read(
        self,
        lakehouse: Lakehouse,
        table: str,
        columns: list[str],
        where: Predicate | None = None,
        version: int | None = None,
    ) -> DataFrame:
        """Their rows of `table` (`where`, at `version`), with `user_id` among the columns."""
        mine = is_in("user_id", self.names)
        return lakehouse.read(
            table,
            version=version,
            where=mine if where is None else And((where, mine)),
            columns=_with_user(columns),
        )

    def pin(self, frame: DataFrame) -> Pinned:
        rows = frame.toArrow()
        return Pinned(frame.sparkSession.createDataFrame(rows, schema=frame.schema), rows)

    def __str__(self) -> str:
        return ", ".join(self.names[:20]) + (" ..." if len(self.names) > 20 else "")


@dataclass(frozen=True)
class EveryUserOf:
    """Every user of some days: `frame` holds their `user_id`s, checkpointed."""

    frame: DataFrame

    def read(
        self,
        lakehouse: Lakehouse,
        table: str,
        columns: list[str],
        where: Predicate | None = None,
        version: int | None = None,
    ) -> DataFrame:
        """Their rows of `table` (`where`, at `version`), with `user_id` among the columns."""
        rows = lakehouse.read(table, version=version, where=where, columns=_with_user(columns))
        return rows.join(self.frame, "user_id", "left_semi")

    def pin(self, frame: DataFrame) -> Pinned:
        return Pinned(frame.localCheckpoint(), None)

    def __str__(self) -> str:
        return "every user of the changed days"


Users = NamedUsers | EveryUserOf


def _with_user(columns: list[str]) -> list[str]:
    return columns if "user_id" in columns else [*columns, "user_id"]
