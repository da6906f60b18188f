"""A sensor's view of the landing zone, kept up to date between ticks by the kernel's file
notifications, so a tick pays for the files that changed, not for every file landed.

Listing a landing zone of 100,000 files costs a stat each, about a second, on every tick.
A `Listing` lists its folder once, then keeps its files' facts current from inotify
events (Linux): a file created, written, appended to, renamed into place or removed is
an event naming it, and only the named files are looked at again. The events are read
when the tick asks, from the queue the kernel filled as the writes happened, so a file
written before a tick is always seen by that tick.

An object store (`S3LandingZone`) raises no event here. With a notification queue (its
`queue_url`: the SQS queue the bucket's event notifications go to), a refresh takes what
the queue names and looks at those objects alone, one request each, side by side; the
queue's messages are taken once per process and kept for every listing of that zone
(`Notifications`), since a message taken off the queue is gone for every other reader.
Without a queue, or when it cannot be read, a refresh is the store's paged listing, whole.

What notifications do not see is made good by listing everything again (a sweep), as
Auto Loader's `backfillInterval` does for its file notifications:
- every `LandingZone.full_listing_seconds` (writers on another machine of a network
  mount raise no event here); 0 lists everything at every tick;
- when the kernel's queue overflowed, or a watched folder was moved or removed (an
  object store's queue: when this process kept fewer of its paths than a listing needs);
- at every tick while the folder does not exist yet, where a watch could not be added
  (the `fs.inotify.max_user_watches` limit), where inotify does not exist (not Linux),
  and where the folder lies on a file system whose writers may be elsewhere (NFS, SMB,
  9p, virtiofs, FUSE: a Docker Desktop bind mount, WSL's Windows drives), whose writes
  raise no event here.

Each change gets a sequence number, so `changed_since(mark)` names every file whose facts
moved after a mark: what a sensor compares with the state it remembered at that mark.

Listings live in the process that evaluates the sensors (the code server), one per
sensor and folder, and the least recently used are closed beyond `KEPT_LISTINGS`: the
kernel allows each user 128 inotify instances.
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from resources.landing import FileStat, LandingZone, in_progress, listable

if TYPE_CHECKING:
    from resources.s3_landing import S3LandingZone

log = logging.getLogger(__name__)

try:
    from inotify_simple import INotify, flags

    NOTIFIABLE = True
except ImportError:  # not Linux: every tick lists everything
    NOTIFIABLE = False

KEPT_LISTINGS = 16
SHARED_FILESYSTEMS = (
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "virtiofs", "ceph", "glusterfs",
    "lustre", "gpfs", "afs", "fuse",
)  # fmt: skip
"""File systems whose files other machines (or the host of a VM) write: inotify sees
only this machine's writes there. `fuse` covers every `fuse.*` type."""
CHANGES_KEPT = 1_000_000
"""Changes remembered for `changed_since`; a mark older than that gets None (list all)."""

if NOTIFIABLE:
    WATCHED = (
        flags.CREATE
        | flags.MODIFY
        | flags.CLOSE_WRITE
        | flags.ATTRIB
        | flags.DELETE
        | flags.MOVED_FROM
        | flags.MOVED_TO
        | flags.DELETE_SELF
        | flags.MOVE_SELF
        | flags.ONLYDIR
    )


@dataclass(frozen=True)
class Mark:
    """A point in one listing's changes."""

    listing: int
    """Which listing (numbered as they are made: a closed one's number is never reused)."""
    seq: int


_NUMBERS = itertools.count()


class Journal:
    """Paths in the order they were recorded, each at a sequence number; past
    `CHANGES_KEPT` the older half is forgotten, and a mark from before it reads None."""

    def __init__(self) -> None:
        self._paths: list[str] = []
        self._dropped = 0  # paths forgotten from the front of `_paths`

    @property
    def end(self) -> int:
        """The sequence number the next path gets."""
        return self._dropped + len(self._paths)

    def record(self, paths: Iterable[str]) -> None:
        self._paths.extend(paths)
        if len(self._paths) > CHANGES_KEPT:
            forget = len(self._paths) // 2
            del self._paths[:forget]
            self._dropped += forget

    def since(self, mark: int) -> list[str] | None:
        """The paths recorded from sequence number `mark` on (None: forgotten)."""
        if mark < self._dropped:
            return None
        return self._paths[mark - self._dropped :]


class Listing:
    """The files under `folder` of the landing zone whose names end with `suffix`, as of
    the last `refresh` (see the module)."""

    def __init__(self, landing: LandingZone, folder: str, suffix: str) -> None:
        self.landing = landing
        self.folder = folder
        self.suffix = suffix
        self.full_listing_seconds = landing.full_listing_seconds
        self.files: dict[str, FileStat] = {}
        self._in_folder: dict[str, set[str]] = {}
        self._changes = Journal()
        self._notify: Any = None
        self._watched: dict[int, str] = {}  # watch descriptor -> absolute folder
        self._listed_at: float | None = None
        self._unwatchable = False  # a watch was refused: list everything at every tick
        self._shared: str | None = None  # the shared file system the folder lies on
        self._queued: int | None = None  # how far into its zone's `Notifications`
        self._number = next(_NUMBERS)

    # -- what a tick reads --------------------------------------------------------------

    @property
    def mark(self) -> Mark:
        return Mark(self._number, self._changes.end)

    def changed_since(self, mark: Mark) -> set[str] | None:
        """Paths whose facts moved after `mark` (None: the mark is not this listing's, or
        older than the changes it keeps)."""
        if mark.listing != self._number:
            return None
        since = self._changes.since(mark.seq)
        return None if since is None else set(since)

    def in_folder(self, folder: str) -> set[str]:
        """Paths of the files directly in `folder` (relative to the landing root)."""
        return self._in_folder.get(folder, set())

    # -- keeping it current -------------------------------------------------------------

    def refresh(self) -> None:
        """Bring the files up to date: from the notifications since the last refresh, or by
        listing everything when a sweep is due or notifications cannot be trusted."""
        due = (
            self._listed_at is None
            or self.full_listing_seconds == 0
            or time.monotonic() - self._listed_at >= self.full_listing_seconds
        )
        if not self.landing.local:
            self._refresh_store(due)
            return
        if due or self._notify is None:
            self._list_all()
            return
        touched: set[str] = set()
        if not self._read_events(touched):
            self._list_all()
            return
        self._look_again(touched)

    def _refresh_store(self, due: bool) -> None:
        """An object store: what its notification queue named since the last refresh, or
        its paged listing, whole (a sweep due, no queue, or the queue unreadable)."""
        queue = _notifications(self.landing)
        if queue is None:
            self._list_all()
            return
        try:
            named, end = queue.since(self._queued)
        except OSError as error:
            log.warning(f"listing {self.folder} whole: {error}")
            self._list_all()
            return
        if due or named is None:
            self._list_all()  # what the queue named up to `end` is in it
        else:
            folder = self.folder.strip("/")
            start = f"{folder}/" if folder else ""
            self._look_again(
                p for p in named if p.startswith(start) and listable(p[len(start) :], self.suffix)
            )
        self._queued = end

    def _look_again(self, paths: Iterable[str]) -> None:
        """Bring the facts of the files at `paths` up to date from what is there now."""
        ordered = sorted(set(paths))
        for path, stat in zip(ordered, self.landing.listed_each(ordered), strict=True):
            self._update(path, stat)

    def close(self) -> None:
        if self._notify is not None:
            self._notify.close()
            self._notify = None
            self._watched.clear()

    def _list_all(self) -> None:
        """List every file (a watch on each folder first, so that nothing written during
        the listing is missed) and record what differs from the files known."""
        self.close()
        if self.landing.local:
            base = self.landing.absolute(self.folder)
            # Until its folder exists there is nothing to watch: each tick looks for it.
            if NOTIFIABLE and self.full_listing_seconds > 0 and base.is_dir() and self._local(base):
                try:
                    if not self._unwatchable:
                        self._notify = INotify()
                except OSError as error:  # the user's inotify instances are all taken
                    log.warning(f"listing {self.folder} at every tick: no inotify ({error})")
            found = self._watch_and_list(str(base))
        else:  # an object store: its listing, paged, at every tick
            found = self.landing.list(self.folder, suffix=self.suffix)
        listed = {stat.path: stat for stat in found}
        for path in self.files.keys() - listed.keys():
            self._update(path, None)
        for path, stat in listed.items():
            self._update(path, stat)
        self._listed_at = time.monotonic()

    def _local(self, base: Path) -> bool:
        """Whether every write to `base` happens on this machine, as far as its file
        system tells (said once in the log when not)."""
        if self._shared is None:
            try:
                mounts = Path("/proc/self/mountinfo").read_text()
            except OSError:
                mounts = ""
            self._shared = shared_filesystem(str(base), mounts) or ""
            if self._shared:
                log.warning(
                    f"listing {self.folder} at every tick: it lies on a {self._shared} file "
                    "system, whose writers elsewhere raise no inotify event here"
                )
        return not self._shared

    def _watch(self, folder: str) -> None:
        if self._notify is None:
            return
        try:
            self._watched[self._notify.add_watch(folder, WATCHED)] = folder
        except FileNotFoundError:
            pass  # gone since it was named: nothing in it to watch
        except OSError as error:  # the user's watch limit
            log.warning(f"listing {self.folder} at every tick: cannot watch {folder} ({error})")
            self._unwatchable = True
            self.close()

    def _read_events(self, touched: set[str]) -> bool:
        """Collect the paths the pending events name into `touched` (watching and listing
        new folders); False when only a full listing can tell what changed."""
        root = str(self.landing.absolute(""))
        while events := self._notify.read(timeout=0):
            for event in events:
                if event.mask & flags.Q_OVERFLOW:
                    log.warning(f"inotify queue overflowed for {self.folder}: listing all")
                    return False
                folder = self._watched.get(event.wd)
                if event.mask & flags.IGNORED:
                    self._watched.pop(event.wd, None)
                    continue
                if folder is None:
                    continue
                if event.mask & (flags.MOVE_SELF | flags.DELETE_SELF):
                    return False  # a watched folder moved or went: its files' paths did
                name = event.name
                if not name or in_progress(name, self.suffix):
                    continue
                full = f"{folder}/{name}"
                is_folder = event.mask & flags.ISDIR and not (
                    self.suffix and name.endswith(self.suffix)
                )
                if is_folder:
                    if event.mask & (flags.DELETE | flags.MOVED_FROM):
                        return False  # every file under it went
                    if event.mask & (flags.CREATE | flags.MOVED_TO):
                        # Its files were written before the watch began: no event named them.
                        touched.update(stat.path for stat in self._watch_and_list(full))
                        if self._notify is None:
                            return False  # it could not be watched
                    continue
                if name.endswith(self.suffix):
                    touched.add(full[len(root) + 1 :])
        return True

    def _watch_and_list(self, top: str) -> list[FileStat]:
        """The files under the absolute folder `top` (none when it does not exist), each
        folder watched before it is listed, so nothing written meanwhile goes unnoticed."""
        found: list[FileStat] = []
        folders = [top]
        while folders:
            folder = folders.pop()
            self._watch(folder)
            files, under = self.landing.list_folder(folder, suffix=self.suffix)
            found.extend(files)
            folders.extend(under)
        return found

    def _update(self, path: str, stat: FileStat | None) -> None:
        known = self.files.get(path)
        if known == stat:
            return
        folder = path.rpartition("/")[0]
        if stat is None:
            del self.files[path]
            self._in_folder[folder].discard(path)
        else:
            self.files[path] = stat
            self._in_folder.setdefault(folder, set()).add(path)
        self._changes.record([path])


def shared_filesystem(path: str, mountinfo: str) -> str | None:
    """The type of the file system holding the absolute `path` when it is one that other
    machines may write (`SHARED_FILESYSTEMS`), from the text of `/proc/self/mountinfo`."""
    best, kind = "", None
    for line in mountinfo.splitlines():
        fields, _, rest = line.partition(" - ")
        parts = fields.split()
        if len(parts) < 5 or not rest:
            continue
        # Mount points escape blanks and backslashes as octal: `\040` is a space.
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), parts[4])
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, rest.split()[0]
    if kind is None:
        return None
    return kind if kind.split(".")[0] in SHARED_FILESYSTEMS else None


class Notifications:
    """The paths one object-store landing zone's queue named, in the order they were
    taken: every listing of that zone in this process reads them from its own mark."""

    def __init__(self, landing: S3LandingZone) -> None:
        self.landing = landing
        self._paths = Journal()
        self._lock = threading.Lock()

    def since(self, mark: int | None) -> tuple[list[str] | None, int]:
        """Every message waiting taken off the queue, then: the paths named after `mark`
        (None when `mark` is None or older than the paths kept), and the mark of now."""
        with self._lock:
            self._paths.record(self.landing.notified())
            return (None if mark is None else self._paths.since(mark)), self._paths.end


_QUEUES: dict[tuple[str, str], Notifications] = {}
_LISTINGS: OrderedDict[tuple[str, ...], Listing] = OrderedDict()
_LOCK = threading.Lock()


def _notifications(landing: LandingZone) -> Notifications | None:
    """This process's reader of the landing zone's notification queue (None: it has
    none)."""
    from resources.s3_landing import S3LandingZone  # imported already where one exists

    if not isinstance(landing, S3LandingZone) or not landing.queue_url:
        return None
    with _LOCK:
        key = (landing.queue_url, landing.spark_root)
        if key not in _QUEUES:
            _QUEUES[key] = Notifications(landing)
        return _QUEUES[key]


def listings(
    sensor: str, landing: LandingZone, folders: Iterable[tuple[str, str]]
) -> list[Listing]:
    """The sensor's listing of each `(folder, suffix)`, refreshed."""
    found = []
    with _LOCK:
        for folder, suffix in folders:
            key = (sensor, landing.spark_root, folder, suffix)
            listing = _LISTINGS.get(key)
            if listing is None or listing.full_listing_seconds != landing.full_listing_seconds:
                if listing is not None:
                    listing.close()
                listing = _LISTINGS[key] = Listing(landing, folder, suffix)
            _LISTINGS.move_to_end(key)
            found.append(listing)
        while len(_LISTINGS) > KEPT_LISTINGS:
            _LISTINGS.popitem(last=False)[1].close()
    for listing in found:
        listing.refresh()
    return found


def changed_since(found: list[Listing], marks: tuple[Mark, ...]) -> set[str] | None:
    """Paths changed in any of `found` since its mark in `marks` (in the same order); None
    when a mark is not of that listing any more (it was closed and made again)."""
    if len(marks) != len(found):
        return None
    changed: set[str] = set()
    for listing, mark in zip(found, marks, strict=True):
        since = listing.changed_since(mark)
        if since is None:
            return None
        changed |= since
    return changed
