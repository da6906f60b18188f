"""Predicates built from data values, rendered for each engine's SQL dialect.

Every predicate the platform sends to Delta (replaceWhere, DELETE, read filters, MERGE
clause conditions that involve data) is built here, so quoting lives in one place. A
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


def render(condition: Predicate | str | None, dialect: Dialect) -> str | None:
    """Render a predicate; plain strings pass through and must hold no data values
    (they are for column-to-column conditions such as `t.id = s.id`)."""
    if condition is None or isinstance(condition, str):
        return condition
    return condition.render(dialect)
