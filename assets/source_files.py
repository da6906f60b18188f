"""Turning landed source files into numbered lines, and bad input into clear errors.

The driver reads each file once (the bytes it fingerprinted are the bytes parsed); Spark
splits the text into lines numbered from 1, so every rejected row can be named by file
and line, and nothing is written while any is rejected.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from resources.landing import LandedFile

MAX_REPORTED_PROBLEMS = 10


@dataclass(frozen=True)
class Problem:
    file: str
    line: int | None
    reason: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.reason}"


class SourceDataError(ValueError):
    """Source files that cannot be ingested; nothing was written."""

    def __init__(self, source: str, problems: Sequence[Problem], *, more: bool = False) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  {p}" for p in self.problems)
        tail = "\n  ... and more" if more else ""
        super().__init__(f"rejected {source} source data (nothing was written):\n{lines}{tail}")


def decode_utf8(landed: LandedFile) -> str | Problem:
    """The file's text, or the problem naming the line where UTF-8 decoding failed."""
    try:
        return landed.content.decode("utf-8")
    except UnicodeDecodeError as e:
        line = landed.content[: e.start].count(b"\n") + 1
        return Problem(landed.path, line, f"not valid UTF-8 ({e.reason})")


def numbered_lines(documents: DataFrame) -> DataFrame:
    """One row per non-blank line of each document (`source_file`, `content`, and any
    other columns, which are carried along), with `source_line` (from 1) and `text`."""
    carried = [c for c in documents.columns if c != "content"]
    return (
        documents.select(
            *carried, F.posexplode(F.split("content", r"\r?\n")).alias("position", "text")
        )
        .where(F.trim("text") != "")
        .select(*carried, (F.col("position") + 1).cast("int").alias("source_line"), "text")
    )


def first_problems(source: str, rows: DataFrame, problem: Column) -> None:
    """Raise SourceDataError naming the first rejected lines (by file and line), if any."""
    bad = (
        rows.where(problem.isNotNull())
        .select("source_file", "source_line", problem.alias("problem"))
        .orderBy("source_file", "source_line")
        .limit(MAX_REPORTED_PROBLEMS + 1)
        .collect()
    )
    if bad:
        raise SourceDataError(
            source,
            [Problem(r.source_file, r.source_line, r.problem) for r in bad[:MAX_REPORTED_PROBLEMS]],
            more=len(bad) > MAX_REPORTED_PROBLEMS,
        )
