"""Predicates built from data values, rendered for each engine's SQL dialect.

Every predicate the platform sends to Delta (replaceWhere, DELETE, read filters, a MERGE's
join and its clauses' conditions and assignments) is built here, so quoting lives in one
place and pattern code writes no SQL. A
subject key or file name containing a quote, a backslash or SQL must never break or widen
a predicate: values are always rendered as typed literals, and column names must be plain
identifiers.

Two dialects differ in how a quote is escaped inside a string literal: DataFusion (delta-rs)
follows ANSI SQL (`'it''s'`, backslash is an ordinary character); Spark SQL treats backslash
as an escape character by default (`'it\\'s'`).
"""

from __future__ import annotations

import datetime as dt
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Dialect = Literal["datafusion", "spark"]
Value = str | int | bool | dt.date | dt.datetime

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")
_COMPARISONS = ("=", "<>", "<", "<=", ">", ">=")


class PredicateError(ValueError):
    """A predicate could not be built safely from the given column or value."""


def identifier(column: str) -> str:
    if not _IDENTIFIER.match(column):
        raise PredicateError(
            f"column name {column!r} is not a plain identifier (optionally alias-qualified)"
        )
    return column


def partition_text(value: Value) -> str:
    """A partition value as Delta's log and folder names hold it (a string)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    return str(value)


def sql_literal(value: Value, *, dialect: Dialect) -> str:
    """Render one data value as a SQL literal of the given dialect."""
    # bool before int: bool is a subclass of int.
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise PredicateError(f"timestamp {value!r} has no time zone; use an aware datetime")
        utc = value.astimezone(dt.UTC).replace(tzinfo=None)
        if dialect == "datafusion":
            # Delta's `timestamp` is microseconds in UTC; delta-rs compares a plain
            # TIMESTAMP literal (nanoseconds, no zone) with it only in queries, and
            # refuses it in write predicates.
            return f"arrow_cast('{utc.isoformat()}Z', 'Timestamp(Microsecond, Some(\"UTC\"))')"
        return f"TIMESTAMP '{utc.isoformat()}Z'"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, str):
        if "\x00" in value:
            raise PredicateError("a string value must not contain a NUL character")
        if dialect == "spark":
            escaped = value.replace("\\", "\\\\").replace("'", "\\'")
        else:
            escaped = value.replace("'", "''")
        return f"'{escaped}'"
    raise PredicateError(f"unsupported literal type {type(value).__name__} for value {value!r}")


class Predicate(ABC):
    """A boolean condition over table columns; render it with `render(dialect)`."""

    @abstractmethod
    def render(self, dialect: Dialect) -> str: ...

    @abstractmethod
    def columns(self) -> frozenset[str]:
        """The columns the condition names."""

    def __and__(self, other: Predicate) -> Predicate:
        return And((self, other))


@dataclass(frozen=True)
class Compare(Predicate):
    column: str
    op: str
    value: Value

    def render(self, dialect: Dialect) -> str:
        if self.op not in _COMPARISONS:
            raise PredicateError(f"unsupported comparison {self.op!r}")
        return f"{identifier(self.column)} {self.op} {sql_literal(self.value, dialect=dialect)}"

    def columns(self) -> frozenset[str]:
        return frozenset((self.column,))


@dataclass(frozen=True)
class In(Predicate):
    column: str
    values: tuple[Value, ...]

    def render(self, dialect: Dialect) -> str:
        if not self.values:
            return "FALSE"
        literals = ", ".join(sql_literal(v, dialect=dialect) for v in self.values)
        return f"{identifier(self.column)} IN ({literals})"

    def columns(self) -> frozenset[str]:
        return frozenset((self.column,))


@dataclass(frozen=True)
class And(Predicate):
    parts: tuple[Predicate, ...]

    def render(self, dialect: Dialect) -> str:
        return " AND ".join(f"({p.render(dialect)})" for p in self.parts)

    def columns(self) -> frozenset[str]:
        return frozenset().union(*(part.columns() for part in self.parts))


@dataclass(frozen=True)
class Or(Predicate):
    parts: tuple[Predicate, ...]

    def render(self, dialect: Dialect) -> str:
        if not self.parts:
            return "FALSE"
        return " OR ".join(f"({p.render(dialect)})" for p in self.parts)

    def columns(self) -> frozenset[str]:
        return frozenset().union(*(part.columns() for part in self.parts))


def eq(column: str, value: Value) -> Predicate:
    return Compare(column, "=", value)


def is_in(column: str, values: Iterable[Value]) -> Predicate:
    return In(column, tuple(values))


def between(column: str, low: Value, high: Value) -> Predicate:
    """Inclusive range `low <= column <= high`."""
    return And((Compare(column, ">=", low), Compare(column, "<=", high)))


def half_open(column: str, low: Value, high: Value) -> Predicate:
    """Range `low <= column < high`: adjacent ranges never share a row."""
    return And((Compare(column, ">=", low), Compare(column, "<", high)))


def any_of(predicates: Iterable[Predicate]) -> Predicate:
    return Or(tuple(predicates))


def all_of(predicates: Iterable[Predicate | None]) -> Predicate | None:
    """Every one of the predicates given (None ones skipped); None when none is left."""
    parts = tuple(p for p in predicates if p is not None)
    if len(parts) <= 1:
        return parts[0] if parts else None
    return And(parts)


def within(column: str, low: Value | None, high: Value | None) -> Predicate | None:
    """Range `low <= column < high`, a side left open when None (None: no bound at all)."""
    return all_of(
        (
            None if low is None else Compare(column, ">=", low),
            None if high is None else Compare(column, "<", high),
        )
    )


def render(condition: Predicate | None, dialect: Dialect) -> str | None:
    return None if condition is None else condition.render(dialect)


# -- MERGE: `t` is the target, `s` the source -----------------------------------------


@dataclass(frozen=True)
class Matches(Predicate):
    """Target and source rows agree on every one of `keys` (`t.k = s.k AND ...`): a
    MERGE's join."""

    keys: tuple[str, ...]

    def render(self, dialect: Dialect) -> str:
        if not self.keys:
            raise PredicateError("a MERGE joins on at least one key")
        return " AND ".join(f"t.{identifier(k)} = s.{identifier(k)}" for k in self.keys)

    def columns(self) -> frozenset[str]:
        return frozenset(f"{side}.{k}" for k in self.keys for side in "ts")


def matches(*keys: str) -> Predicate:
    return Matches(keys)


@dataclass(frozen=True)
class IsTrue(Predicate):
    """A boolean column, e.g. `IsTrue("s.is_deleted")`."""

    column: str

    def render(self, dialect: Dialect) -> str:
        return identifier(self.column)

    def columns(self) -> frozenset[str]:
        return frozenset((self.column,))


@dataclass(frozen=True)
class Not(Predicate):
    part: Predicate

    def render(self, dialect: Dialect) -> str:
        return f"NOT ({self.part.render(dialect)})"

    def columns(self) -> frozenset[str]:
        return self.part.columns()


@dataclass(frozen=True)
class SortsAfter(Predicate):
    """The source row comes after the target row in the lexicographic order of `order`
    (`s.a > t.a OR (s.a = t.a AND (s.b > t.b OR ...))`)."""

    order: tuple[str, ...]

    def render(self, dialect: Dialect) -> str:
        condition = "FALSE"
        for column in reversed(self.order):
            s, t = f"s.{identifier(column)}", f"t.{identifier(column)}"
            condition = f"({s} > {t} OR ({s} = {t} AND {condition}))"
        return condition

    def columns(self) -> frozenset[str]:
        return frozenset(f"{side}.{c}" for c in self.order for side in "ts")


@dataclass(frozen=True)
class SourceColumn:
    """A MERGE assignment taking the source row's `column`."""

    column: str

    def render(self, dialect: Dialect) -> str:
        return f"s.{identifier(self.column)}"


@dataclass(frozen=True)
class Constant:
    """A MERGE assignment of a value, rendered as a typed literal."""

    value: Value

    def render(self, dialect: Dialect) -> str:
        return sql_literal(self.value, dialect=dialect)


@dataclass(frozen=True)
class Sha256:
    """A column computed in a read: the SHA-256 digest (32 bytes) of the UTF-8 bytes of the
    text column `column`. A standard hash, so every engine computes the same bytes."""

    column: str

    def render(self, dialect: Dialect) -> str:
        name = identifier(self.column)
        return (
            f"digest({name}, 'sha256')" if dialect == "datafusion" else f"unhex(sha2({name}, 256))"
        )


Assignment = SourceColumn | Constant | Predicate
"""A value a MERGE sets: a source column, a constant, or a boolean condition."""


def from_source(columns: Iterable[str]) -> dict[str, Assignment]:
    """Each of `columns` set from the source column of the same name."""
    return {column: SourceColumn(column) for column in columns}
