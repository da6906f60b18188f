"""The bad-input corpus: what a case is, how its files are put in the landing zone, and
the state of every Delta table, so a test can show a refused input changed none.

Each source's module lists its cases and runs them grouped, as few runs as the asset
allows. A case ends in one of three outcomes a data engineer can rely on:

- `Refused`: the run fails with a message naming the file (and line and field where
  there is one); no table, data or control, moves: not its Delta version, not a row.
- `Ignored`: the entry is not the source's input (a special file, a folder, a file off
  the layout); a warning names it, and the tables do not move either.
- `Accepted`: a documented tolerance (a byte-order mark, CRLF line ends, keys with odd
  characters): the rows land exactly as given.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
from support import VanishingListing, table_contents

from resources import Lakehouse, LandingZone

KINDS = (
    "empty file",
    "header only",
    "truncated last line",
    "CRLF",
    "BOM",
    "non-UTF-8",
    "missing field",
    "extra field",
    "duplicated field",
    "wrong type",
    "out-of-range number",
    "no offset",
    "impossible date",
    "far past",
    "far future",
    "huge line",
    "odd key",
    "FIFO",
    "dangling symlink",
    "directory",
    "vanished file",
    "off the layout",
    "malformed",
)
"""The classes of bad input the corpus must cover, for every source."""


class Special:
    """A landing entry that is not a regular file with content."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


FIFO = Special("a named pipe")
DANGLING = Special("a symbolic link to nothing")
DIRECTORY = Special("a directory")
VANISHED = Special("listed, then gone before it is read")


@dataclass(frozen=True)
class Refused:
    message: str
    """What the error says, from the file's landing path on."""


@dataclass(frozen=True)
class Ignored:
    warning: str


@dataclass(frozen=True)
class Accepted:
    keys: tuple[str, ...] = ()
    """The keys of the rows the case lands."""


@dataclass(frozen=True)
class Case:
    name: str
    kind: str
    files: Mapping[str, bytes | Special]
    """Landing paths (or names in the case's folder) and what each holds."""
    outcome: Refused | Ignored | Accepted

    def __post_init__(self) -> None:
        assert self.kind in KINDS, self.kind


@dataclass(frozen=True)
class LineCase:
    """A case that is one line: the source's line cases share one file, and one run
    names each at its line."""

    name: str
    kind: str
    line: bytes
    outcome: Refused | Accepted
    """A refusal's message is the reason after `<file>:<line>: `."""

    def __post_init__(self) -> None:
        assert self.kind in KINDS, self.kind
        assert self.line.endswith(b"\n") and self.line.count(b"\n") == 1, self.name


def one_file(head: bytes, cases: Sequence[LineCase]) -> tuple[bytes, dict[str, int]]:
    """`head` then the cases' lines, and the line number of each case by name."""
    first = head.count(b"\n") + 1
    numbers = {case.name: first + i for i, case in enumerate(cases)}
    return head + b"".join(case.line for case in cases), numbers


def in_place_of_the_file(missing: str) -> list[Case]:
    """Where a source expects one file (key `f`): something else there, or nothing
    (refused with `missing`)."""
    return [
        Case(
            "a named pipe",
            "FIFO",
            {"f": FIFO},
            Refused(": it is a named pipe (FIFO), not a regular file"),
        ),
        Case(
            "a link to nothing",
            "dangling symlink",
            {"f": DANGLING},
            Refused(": it is a symbolic link to nothing, not a regular file"),
        ),
        Case(
            "a folder",
            "directory",
            {"f": DIRECTORY},
            Refused(": it is a folder, not a regular file"),
        ),
        Case("no file", "vanished file", {}, Refused(missing)),
    ]


def place(landing: LandingZone, files: Mapping[str, bytes | Special]) -> None:
    """Put `files` in the landing zone: content as given, special entries made real
    (`VANISHED` needs a `VanishingListing` to show it)."""
    for path, content in files.items():
        target = Path(landing.root) / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if content is FIFO:
            os.mkfifo(target)
        elif content is DANGLING:
            os.symlink(target.parent / f"{target.name}.gone", target)
        elif content is DIRECTORY:
            target.mkdir()
            (target / "inside.txt").write_text("a folder named like a file\n")
        elif content is VANISHED:
            continue
        else:
            target.write_bytes(content)


def clear(landing: LandingZone, path: str) -> None:
    """Remove whatever is at `path`: a file, a link, a named pipe or a folder."""
    target = Path(landing.root) / path
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    else:
        target.unlink(missing_ok=True)


def vanishing(landing: LandingZone, placed: Mapping[str, bytes | Special]) -> VanishingListing:
    """`landing`, listing the `VANISHED` entries of `placed` as if they were still there."""
    return VanishingListing(
        root=landing.root,
        vanished="\n".join(p for p, content in placed.items() if content is VANISHED),
    )


def tables(lakehouse: Lakehouse) -> dict[str, tuple[int, str]]:
    """Every Delta table under the lakehouse root, data and control: its version and a
    digest of its rows."""
    return {
        name: (lakehouse.version(name), digest)
        for name, digest in table_contents(lakehouse).items()
    }


def json_line(**fields: object) -> bytes:
    return (json.dumps(fields) + "\n").encode()


def failure_text(result: dg.ExecuteInProcessResult) -> str:
    """A failed run's error with its causes, as the run's log shows it."""
    assert not result.success
    return "\n".join(
        event.step_failure_data.error.to_string() for event in result.get_step_failure_events()
    )


def assert_refused(
    lakehouse: Lakehouse, run: Callable[[], dg.ExecuteInProcessResult], messages: Iterable[str]
) -> None:
    """`run()` fails saying each of `messages`, and no table moves."""
    before = tables(lakehouse)
    error = failure_text(run())
    after = tables(lakehouse)
    assert after == before, sorted(set(after.items()) ^ set(before.items()))
    for message in messages:
        assert message in error, (message, error)


def assert_lines_refused(
    lakehouse: Lakehouse,
    landing: LandingZone,
    path: str,
    head: bytes,
    cases: Sequence[LineCase],
    run: Callable[[], dg.ExecuteInProcessResult],
) -> None:
    """The line cases in one file at `path` after `head`: one run refuses the file,
    naming each case at its line, and no table moves."""
    body, numbers = one_file(head, cases)
    place(landing, {path: body})
    assert_refused(
        lakehouse, run, [f"{path}:{numbers[case.name]}: {case.outcome.message}" for case in cases]
    )
