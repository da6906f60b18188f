"""The landing zone: where source files arrive, how they are listed, fingerprinted and read."""

from __future__ import annotations

import builtins
import hashlib
import logging
import os
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, ClassVar, NamedTuple, TypeVar

import dagster as dg
from pydantic import Field

if TYPE_CHECKING:
    from pyarrow import fs as pafs

log = logging.getLogger(__name__)
Item = TypeVar("Item")
Done = TypeVar("Done")


class FileStat(NamedTuple):
    """What listing a file costs: no content read. (Named tuples, not dataclasses: a
    sensor's tick makes one per landed file, 100,000s of them.)"""

    path: str
    """Relative to the landing root, '/'-separated."""
    size: int
    mtime_ns: int
    etag: str | None = None
    """An object store's entity tag: it changes whenever the object is written (None on
    a local disk)."""


class Fingerprint(NamedTuple):
    """A file's identity: its content hash decides whether anything changed; size, mtime
    and entity tag only decide whether the hash must be computed again."""

    path: str
    size: int
    mtime_ns: int
    sha256: str
    etag: str | None = None


@dataclass(frozen=True)
class LandedFile:
    """A file read once: the bytes that were hashed are the bytes that get parsed."""

    fingerprint: Fingerprint
    content: bytes
    prefix_sha256: Mapping[int, str] = field(default_factory=dict)
    """SHA-256 of `content[:n]` for the prefix lengths the reader asked for."""

    @property
    def path(self) -> str:
        return self.fingerprint.path


def prefix_digests(content: bytes, cuts: Sequence[int]) -> list[str]:
    """SHA-256 of `content[:cut]` for each of the ascending `cuts`, in one pass over the
    bytes and without copying them."""
    view, digest, done, digests = memoryview(content), hashlib.sha256(), 0, []
    for cut in cuts:
        digest.update(view[done:cut])
        done = cut
        digests.append(digest.copy().hexdigest())
    return digests


def landed(
    path: str,
    content: bytes,
    mtime_ns: int,
    prefixes: Callable[[bytes], Iterable[int]] | None,
    etag: str | None = None,
) -> LandedFile:
    """A file read, hashed whole and at the prefix lengths `prefixes(content)` names."""
    cuts = sorted({min(max(n, 0), len(content)) for n in (prefixes(content) if prefixes else ())})
    *prefix_hashes, sha256 = prefix_digests(content, [*cuts, len(content)])
    fingerprint = Fingerprint(path, len(content), mtime_ns, sha256, etag)
    return LandedFile(fingerprint, content, dict(zip(cuts, prefix_hashes, strict=True)))


def sources_digest(fingerprints: Iterable[Fingerprint]) -> str:
    """One hash over a set of files (path + content hash), independent of listing order
    and mtimes: equal digests mean the same input, whatever was re-notified or touched."""
    digest = hashlib.sha256()
    for path, sha in sorted((f.path, f.sha256) for f in fingerprints):
        digest.update(f"{path}\0{sha}\n".encode())
    return digest.hexdigest()


class LandingFileError(OSError):
    """A landed file that cannot be read as a file."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def _regular_file(full: Path | os.DirEntry) -> tuple[os.stat_result | None, str | None]:
    """The file's stat (through a symbolic link), or what it is when no regular file."""
    try:
        st = full.stat()
    except FileNotFoundError:
        return None, "a symbolic link to nothing" if full.is_symlink() else "gone since listed"
    except OSError as error:
        return None, f"unreadable ({error.strerror})"
    if not stat.S_ISREG(st.st_mode):
        return None, _kind(st.st_mode)
    return st, None


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def in_progress(name: str, suffix: str = "") -> bool:
    """Whether a file or folder `name` is a writer's work in progress: a hidden or
    temporary name (leading '.' or '_'), unless it is the very name asked for (a marker
    such as `_SUCCESS`, which a writer leaves when it is done)."""
    return name.startswith((".", "_")) and name != suffix


def listable(relative: str, suffix: str = "") -> bool:
    """Whether the file at `relative` (to a listed folder, '/'-separated) is one a listing
    with `suffix` names: its name ends with `suffix`, no part of it is work in progress,
    and no folder on the way is named like a file."""
    *folders, name = relative.split("/")
    return (
        name.endswith(suffix)
        and not any(in_progress(part, suffix) for part in (*folders, name))
        and not any(suffix and folder.endswith(suffix) for folder in folders)
    )


class LandingZone(dg.ConfigurableResource):
    """Source files under one local root (or a mount every Spark executor sees at the same
    path). Sensors list and fingerprint them here; Spark assets only list them here and
    read them on the executors (`assets/source_files.py`); telemetry reads them here, so
    its content hashes and parsed rows come from the same bytes. Under an `s3://` root it
    is an `S3LandingZone` (`resources/s3_landing.py`)."""

    local: ClassVar[bool] = True
    """Whether the files lie on a file system of this machine (its kernel's notifications
    and paths apply)."""
    mtime_step_ms: ClassVar[int] = 1
    """The precision of the modification times it gives, in milliseconds."""

    root: str
    full_listing_seconds: int = Field(
        default=600,
        ge=0,
        description="How often a file sensor lists every landed file again. Between those "
        "listings it follows the kernel's file notifications (inotify), which see every "
        "write made on this machine (on a network or VM file system, whose writers may be "
        "elsewhere, it lists at every tick). 0: list everything at every tick (a tick "
        "then costs a stat per landed file).",
    )

    def absolute(self, path: str) -> Path:
        """The file's resolved local path; refuses paths that leave the landing zone."""
        root = Path(self.root).resolve()
        full = (root / path).resolve()
        if root != full and root not in full.parents:
            raise ValueError(f"path {path!r} leaves the landing zone {self.root!r}")
        return full

    def spark_path(self, path: str) -> str:
        """Where Spark reads the file at `path`."""
        return str(self.absolute(path))

    @property
    def spark_root(self) -> str:
        """The landing root as Spark renders the paths of the files it read."""
        return f"file:{self.absolute('')}/"

    def arrow_filesystem(self) -> tuple[pafs.FileSystem, str]:
        """A pyarrow file system and the landing root's path in it: how code that cannot
        import this project (Spark's executors) reads the files."""
        from pyarrow import fs

        return fs.LocalFileSystem(), str(self.absolute(""))

    def list(self, prefix: str, *, suffix: str = "", recursive: bool = True) -> list[FileStat]:
        """Regular files under `prefix` (in its sub-folders too, unless not `recursive`)
        whose name ends with `suffix`, sorted by path (see `list_folder` for what is left
        out)."""
        base = self.absolute(prefix)
        if not base.is_dir():
            return []
        stats = []
        folders = [str(base)]
        while folders:
            files, under = self.list_folder(folders.pop(), suffix=suffix)
            stats.extend(files)
            if recursive:
                folders.extend(under)
        return sorted(stats, key=lambda s: s.path)

    def list_folders(
        self, folders: Sequence[str], *, suffix: str = ""
    ) -> dict[str, builtins.list[FileStat]]:
        """The files directly in each of `folders` whose name ends with `suffix` (`list`,
        not recursive), by folder: a range's day folders, say. An object store lists
        folders side by side in one pass where it can."""
        return {folder: self.list(folder, suffix=suffix, recursive=False) for folder in folders}

    def list_folder(
        self, folder: str, *, suffix: str = ""
    ) -> tuple[builtins.list[FileStat], builtins.list[str]]:
        """The regular files directly in the absolute `folder` whose name ends with
        `suffix`, and its sub-folders (absolute; symbolic links to folders are not
        followed). Hidden and temporary names are writers' work in progress
        (`in_progress`). Anything else with a file's name (a named pipe, a socket, a device, a
        symbolic link to nothing, a folder) is skipped with a warning naming it: reading a
        named pipe would block the run for ever. A folder gone since it was named has no
        files."""
        root = str(self.absolute(""))
        under = folder[len(root) + 1 :]
        stats: builtins.list[FileStat] = []
        folders: builtins.list[str] = []
        # os.scandir and text, not os.walk and Path: a full listing looks at every landed
        # file, and Path's work per file made listing 100,000 files take seconds.
        try:
            entries = os.scandir(folder)
        except FileNotFoundError:
            return [], []
        with entries:
            for entry in entries:
                name = entry.name
                if in_progress(name, suffix):
                    continue
                # A folder named like a file is where a file belongs: named, not walked.
                if entry.is_dir() and not (suffix and name.endswith(suffix)):
                    if not entry.is_symlink():
                        folders.append(entry.path)
                    continue
                if not name.endswith(suffix):
                    continue
                listed = self._listed(f"{under}/{name}" if under else name, entry)
                if listed is not None:
                    stats.append(listed)
        return stats, folders

    def listed_each(
        self, paths: Sequence[str], *, adjacent: bool = False
    ) -> builtins.list[FileStat | None]:
        """`listed` of each of `paths`, in order. `adjacent`: they lie side by side (a
        range's files), which an object store may list together."""
        return builtins.list(self._each(self.listed, paths))

    def listed(self, path: str) -> FileStat | None:
        """What a listing gives for the file at `path` now: its facts, or None when nothing
        is there, or something other than a regular file (named in a warning, as a listing
        names it)."""
        entry = Path(self.root) / path
        return self._listed(path, entry) if os.path.lexists(entry) else None

    @staticmethod
    def _listed(relative: str, entry: Path | os.DirEntry) -> FileStat | None:
        st, problem = _regular_file(entry)
        if st is None:
            log.warning(f"landing file {relative} skipped: it is {problem}")
            return None
        return FileStat(relative, st.st_size, st.st_mtime_ns)

    def exists(self, path: str) -> bool:
        return self.absolute(path).is_file()

    def stat(self, path: str) -> FileStat | None:
        """The listing facts of one file; None when nothing is there. Raises
        LandingFileError, naming what it is, when something other than a regular file is
        (a named pipe, a folder, a symbolic link to nothing)."""
        self.absolute(path)  # refuses a path, or a link, that leaves the landing zone
        entry = Path(self.root) / path
        if not os.path.lexists(entry):
            return None
        st, problem = _regular_file(entry)
        if st is None:
            raise LandingFileError(path, f"it is {problem}, not a regular file")
        return FileStat(path, st.st_size, st.st_mtime_ns)

    def head(self, path: str, size: int = 4096) -> bytes:
        """The file's first `size` bytes (a header line; what of a growing file was
        ingested)."""
        with self._open(path) as f:
            return f.read(size)

    def _open(self, path: str) -> BinaryIO:
        """The landed file, opened for reading only if it is a regular file: the open does
        not wait for a writer (a named pipe put where a file was listed), and anything but
        a regular file is refused, named."""
        full = self.absolute(path)
        descriptor = os.open(full, os.O_RDONLY | os.O_NONBLOCK)
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            os.close(descriptor)
            raise LandingFileError(path, f"it is {_kind(mode)}, not a regular file")
        return os.fdopen(descriptor, "rb")

    def read(
        self, path: str, *, prefixes: Callable[[bytes], Iterable[int]] | None = None
    ) -> LandedFile:
        """The file's bytes and hash. `prefixes(content)` names prefix lengths to hash as
        well (e.g. what of a growing file was seen before): all hashes come from one pass
        over the bytes, which matters for files of hundreds of megabytes."""
        with self._open(path) as f:
            content = f.read()
            st = os.fstat(f.fileno())
        return landed(path, content, st.st_mtime_ns, prefixes)

    def fingerprints(
        self, stats: Iterable[FileStat], known: Mapping[str, Fingerprint] | None = None
    ) -> dict[str, Fingerprint]:
        """Fingerprints of the listed files by path (see `fingerprint`). A file gone or
        unreadable since it was listed is left out with a warning naming it: the next
        listing looks at it again, and the other files are not held up."""
        listed = builtins.list(stats)
        found = self._each(lambda stat: self._fingerprint_or_none(stat, known), listed)
        return {stat.path: print_ for stat, print_ in zip(listed, found, strict=True) if print_}

    def _fingerprint_or_none(
        self, listed: FileStat, known: Mapping[str, Fingerprint] | None
    ) -> Fingerprint | None:
        try:
            return self.fingerprint(listed, known)
        except OSError as error:
            gone = isinstance(error, FileNotFoundError)
            log.warning(
                f"landing file {listed.path} skipped: "
                + ("gone since it was listed" if gone else f"cannot be read ({error})")
            )
            return None

    @staticmethod
    def _each(work: Callable[[Item], Done], items: Sequence[Item]) -> Iterable[Done]:
        """`work` done on each of `items`, in order (here one after the other)."""
        return map(work, items)

    def fingerprint(
        self, stat: FileStat, known: Mapping[str, Fingerprint] | None = None
    ) -> Fingerprint:
        """The file's fingerprint, re-using `known[path]` when size, mtime and entity tag
        are unchanged (re-hashing only what may have changed)."""
        previous = (known or {}).get(stat.path)
        if (
            previous
            and previous.size == stat.size
            and previous.mtime_ns == stat.mtime_ns
            and previous.etag == stat.etag
        ):
            return previous
        return self._hashed(stat)

    def _hashed(self, stat: FileStat) -> Fingerprint:
        """The fingerprint of the listed file, read again."""
        return self.read(stat.path).fingerprint
