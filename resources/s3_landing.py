"""A landing zone in an object store: source files land as objects under `s3://bucket/prefix`.

What a local landing zone does with a directory listing, a stat and a read, this one does
with the S3 API, through boto3:
- a listing is `ListObjectsV2`, paged (`page_size` keys a request): every key's size,
  last-modified time and entity tag (ETag) come with the page, so unchanged files cost
  no request of their own, and a changed ETag (a replaced object) is seen even where
  size and time are equal; one object's facts are one `HeadObject`, and times are kept to
  the whole second, as S3 keeps them, so a listing and a lookup agree;
- a header line is a ranged `GetObject` (`Range: bytes=0-4095`), and so is what of a
  growing file a run on Spark's executors reads;
- Spark reads the files through S3A (`s3a://`), configured from the same settings.

An object store has no notification a sensor can follow without a queue of its own. With
`queue_url`, the SQS queue the bucket's event notifications go to (`s3:ObjectCreated:*`
and `s3:ObjectRemoved:*`, straight or through SNS), a sensor's tick takes the keys the
queue names and looks at those objects alone (`notified`), as Auto Loader's
file-notification mode does; a sweep every `full_listing_seconds` lists everything again.
Without one, a sensor lists its folders whole at every tick, one request per 1,000 keys.

This module is imported only where an `s3://` landing root is configured: it loads the
object-store settings (`resources/object_store.py`) and boto3.
"""

from __future__ import annotations

import bisect
import builtins
import datetime as dt
import errno
import json
import logging
import posixpath
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar
from urllib.parse import unquote_plus

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from pyarrow import fs as pafs
from pydantic import Field

from resources.landing import (
    Done,
    FileStat,
    Fingerprint,
    Item,
    LandedFile,
    LandingFileError,
    LandingZone,
    landed,
    listable,
)
from resources.object_store import S3Storage
from resources.object_uri import object_path

log = logging.getLogger(__name__)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MISSING = {"NoSuchKey", "404", "NotFound"}
_CLIENTS: dict[tuple, Any] = {}
_LOCK = threading.Lock()
READERS = 16
"""Objects a sensor's tick reads at once (new or changed ones, to hash them)."""
LOOKUPS_PER_PAGE = 10
"""Objects a listing's page must find for it to replace their `HeadObject`s: a page of
up to 1,000 keys costs a request, where S3's price of a listing request is that of about
12 lookups."""


class S3LandingZone(LandingZone):
    """Source files under an `s3://bucket/prefix` root (see the module)."""

    local: ClassVar[bool] = False
    mtime_step_ms: ClassVar[int] = 1000
    s3: S3Storage = S3Storage()
    """Endpoint and credentials (unset fields: the AWS_* environment)."""
    page_size: int = Field(
        default=1000, ge=1, le=1000, description="Keys asked for in each listing request."
    )
    queue_url: str = Field(
        default="",
        description="The SQS queue that the bucket's event notifications (objects created "
        "and removed) go to, read by this landing zone's sensors alone: a tick then looks "
        "at the objects the queue names instead of listing them all. Empty: every tick "
        "lists.",
    )

    # -- addresses ----------------------------------------------------------------------

    @property
    def _bucket(self) -> str:
        return object_path(self.root).partition("/")[0]

    @property
    def _prefix(self) -> str:
        """The root's key prefix, with its trailing '/' ('' at the bucket's top)."""
        inside = object_path(self.root).partition("/")[2]
        return f"{inside}/" if inside else ""

    def _key(self, path: str) -> str:
        """The object key of `path`; refuses paths that leave the landing zone."""
        normal = posixpath.normpath(path) if path else ""
        if normal in (".", ""):
            return self._prefix.rstrip("/")
        if normal.startswith(("/", "../")) or normal == "..":
            raise ValueError(f"path {path!r} leaves the landing zone {self.root!r}")
        return self._prefix + normal

    def absolute(self, path: str) -> Any:
        """Refused: objects have no local path (nor folders to walk, nor descriptors)."""
        raise TypeError(f"{self.root} is an object store: its files have no local path")

    def spark_path(self, path: str) -> str:
        return f"s3a://{self._bucket}/{self._key(path)}"

    @property
    def spark_root(self) -> str:
        return f"s3a://{self._bucket}/{self._prefix}"

    def arrow_filesystem(self) -> tuple[pafs.FileSystem, str]:
        return self.s3.filesystem(), object_path(self.root)

    # -- listing ------------------------------------------------------------------------

    def list(self, prefix: str, *, suffix: str = "", recursive: bool = True) -> list[FileStat]:
        """The objects under `prefix` (under its sub-folders too, unless not `recursive`)
        whose name ends with `suffix`, sorted by path. Keys with a hidden or temporary
        part below `prefix` are writers' work in progress (`in_progress`)."""
        base, root = self._key(prefix), len(self._prefix)
        start = f"{base}/" if base else ""
        found = [
            _stat_of(listed, root)
            for listed in self._objects(start, delimiter=not recursive)
            if listable(listed["Key"][len(start) :], suffix)
        ]
        return sorted(found, key=lambda s: s.path)

    def list_folders(
        self, folders: Sequence[str], *, suffix: str = ""
    ) -> dict[str, builtins.list[FileStat]]:
        """The files directly in each of `folders`, by folder: the folders of one parent
        listed together (`_list_siblings`)."""
        siblings: dict[str, dict[str, str]] = {}  # by parent: each folder, by its name
        for folder in folders:
            parent, _, name = folder.rpartition("/")
            siblings.setdefault(parent, {})[name] = folder
        found: dict[str, builtins.list[FileStat]] = {}
        for parent, named in siblings.items():
            listed = self._list_siblings(parent, sorted(named), suffix)
            found |= {named[name]: files for name, files in listed.items()}
        return found

    def _list_siblings(
        self, parent: str, folders: Sequence[str], suffix: str
    ) -> dict[str, builtins.list[FileStat]]:
        """The files directly in each of the sorted `folders` of `parent`, by name: one
        paged listing of the keys from the first folder to the last, for as long as its
        pages hold a folder or more each (a range's day folders, side by side), a request
        per 1,000 keys where a listing each would be a request per folder. The folders it
        did not reach are listed one by one."""
        base, root = self._key(parent), len(self._prefix)
        base = f"{base}/" if base else ""
        found: dict[str, builtins.list[FileStat]] = {name: [] for name in folders}
        whole = 0  # folders[:whole] are listed whole
        if len(folders) > 1:
            # '0' sorts right after '/': every key in the last folder comes before it.
            pages = self._pages_between(base + folders[0], f"{base}{folders[-1]}0")
            for count, page in enumerate(pages, 1):
                for entry in page:
                    name, _, file = entry["Key"][len(base) :].partition("/")
                    if name in found and file and "/" not in file and listable(file, suffix):
                        found[name].append(_stat_of(entry, root))
                if page:
                    reached = page[-1]["Key"][len(base) :].partition("/")[0]
                    whole = bisect.bisect_left(folders, reached)
                if whole < count:
                    break
            else:
                whole = len(folders)
        for name in folders[whole:]:
            found[name] = self.list(posixpath.join(parent, name), suffix=suffix, recursive=False)
        return found

    def listed_each(
        self, paths: Sequence[str], *, adjacent: bool = False
    ) -> builtins.list[FileStat | None]:
        """`listed` of each of `paths`, in order: one `HeadObject` each, side by side. When
        they are `adjacent` (a range's files, the folders listed together) and number
        LOOKUPS_PER_PAGE or more, one paged listing of the keys from the first to the last
        finds them first, for as long as its pages find LOOKUPS_PER_PAGE or more each."""
        keys = sorted({self._key(path) for path in paths})
        listed: dict[str, dict] = {}
        reached = ""  # every key up to it was listed
        if adjacent and len(keys) >= LOOKUPS_PER_PAGE:
            for count, page in enumerate(self._pages_between(keys[0][:-1], keys[-1]), 1):
                listed.update((entry["Key"], entry) for entry in page)
                reached = page[-1]["Key"] if page else reached
                if bisect.bisect_right(keys, reached) < count * LOOKUPS_PER_PAGE:
                    break
            else:
                reached = keys[-1]
        looked_up = iter(self._each(self.stat, [p for p in paths if self._key(p) > reached]))
        stats: builtins.list[FileStat | None] = []
        for path in paths:
            key = self._key(path)
            if key > reached:
                stats.append(next(looked_up))
            else:
                stats.append(_stat_of(listed[key], len(self._prefix)) if key in listed else None)
        return stats

    def _pages_between(self, after: str, last: str) -> Iterator[builtins.list[dict]]:
        """The pages of one listing of the keys after `after` up to `last`."""
        prefix = posixpath.commonprefix([after, last])
        for page, reached in self._pages(Prefix=prefix, StartAfter=after):
            yield [entry for entry in page if entry["Key"] <= last]
            if reached >= last:
                return

    def _objects(self, start: str, *, delimiter: bool = False) -> Iterator[dict]:
        options = {"Delimiter": "/"} if delimiter else {}
        for page, _ in self._pages(Prefix=start, **options):
            yield from page

    def _pages(self, **listing: str) -> Iterator[tuple[builtins.list[dict], str]]:
        """The pages of one `ListObjectsV2` listing (console "folder" markers left out),
        each with the last key it reached ('' for none)."""
        pages = (
            self._client()
            .get_paginator("list_objects_v2")
            .paginate(Bucket=self._bucket, **listing, PaginationConfig={"PageSize": self.page_size})
        )
        for page in pages:
            contents = page.get("Contents", [])
            reached = contents[-1]["Key"] if contents else ""
            yield [entry for entry in contents if not entry["Key"].endswith("/")], reached

    def listed(self, path: str) -> FileStat | None:
        return self.stat(path)

    def stat(self, path: str) -> FileStat | None:
        """The facts of one object (None when there is none), from one `HeadObject`: a
        request whose cost does not grow with the bucket, as a prefix listing's may."""
        try:
            head = self._client().head_object(Bucket=self._bucket, Key=self._key(path))
        except ClientError as error:
            if _code(error) in _MISSING:
                return None
            raise _refused(path, error) from error
        return FileStat(
            path, head["ContentLength"], _seconds_ns(head["LastModified"]), head["ETag"]
        )

    def exists(self, path: str) -> bool:
        return self.stat(path) is not None

    def notified(self) -> builtins.list[str]:
        """The paths under the root that the queue's messages name, every message waiting
        taken off the queue: a path may come more than once and in any order (SQS delivers
        at least once, unordered), so a name only says "look again". A short poll may miss
        a message just sent; the next call takes it. Raises OSError when the queue cannot
        be read."""
        queue = self._client("sqs")
        paths: builtins.list[str] = []
        while True:
            try:
                messages = queue.receive_message(
                    QueueUrl=self.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0
                ).get("Messages", [])
                if not messages:
                    return paths
                for message in messages:
                    paths.extend(self._paths_named(message))
                queue.delete_message_batch(
                    QueueUrl=self.queue_url,
                    Entries=[
                        {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]}
                        for n, m in enumerate(messages)
                    ],
                )
            except (ClientError, BotoCoreError) as error:
                problem = _code(error) if isinstance(error, ClientError) else error
                raise OSError(f"queue {self.queue_url} cannot be read ({problem})") from error

    def _paths_named(self, message: dict) -> Iterator[str]:
        """The paths under the root that one S3 event notification names (none for its
        test event, or for another bucket's or folder's objects)."""
        try:
            event = json.loads(message["Body"])
            if event.get("Type") == "Notification":  # through an SNS topic
                event = json.loads(event["Message"])
            records = [
                (r["s3"]["bucket"]["name"], unquote_plus(r["s3"]["object"]["key"]))
                for r in event.get("Records", ())
            ]
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning(
                f"{self.queue_url}: message {message.get('MessageId')} skipped: "
                "not an S3 event notification"
            )
            return
        for bucket, key in records:
            if bucket == self._bucket and key.startswith(self._prefix):
                yield key[len(self._prefix) :]

    # -- reading ------------------------------------------------------------------------

    def head(self, path: str, size: int = 4096) -> bytes:
        if size <= 0:
            return b""
        return self._get(path, Range=f"bytes=0-{size - 1}")[0]

    def read(
        self, path: str, *, prefixes: Callable[[bytes], Iterable[int]] | None = None
    ) -> LandedFile:
        content, etag, mtime_ns = self._get(path)
        return landed(path, content, mtime_ns, prefixes, etag)

    def _hashed(self, stat: FileStat) -> Fingerprint:
        return self._read_listed(stat, None).fingerprint

    def _read_listed(
        self, stat: FileStat, prefixes: Callable[[bytes], Iterable[int]] | None
    ) -> LandedFile:
        """The listed object, read only if its ETag is still the listed one (`If-Match`):
        the listing's facts are the bytes'. One replaced since is refused, named, and
        looked at again by the next listing."""
        content, etag, _ = self._get(stat.path, IfMatch=stat.etag or "*")
        return landed(stat.path, content, stat.mtime_ns, prefixes, etag)

    @staticmethod
    def _each(work: Callable[[Item], Done], items: Sequence[Item]) -> Iterable[Done]:
        """Objects are looked at side by side (a request waits on the network, not the
        CPU)."""
        if len(items) < 2:
            return map(work, items)
        with ThreadPoolExecutor(max_workers=READERS) as pool:
            return builtins.list(pool.map(work, items))

    def _get(self, path: str, **ranged: str) -> tuple[bytes, str, int]:
        """The object's bytes (of the range asked for), ETag and modification time."""
        try:
            response = self._client().get_object(Bucket=self._bucket, Key=self._key(path), **ranged)
        except ClientError as error:
            if _code(error) == "InvalidRange":  # a range of an empty object
                return b"", "", 0
            raise _refused(path, error) from error
        with response["Body"] as body:
            return body.read(), response["ETag"], _seconds_ns(response["LastModified"])

    def _client(self, service: str = "s3") -> Any:
        """One boto3 client per process, service and settings (clients are thread-safe;
        making one costs tens of milliseconds)."""
        s3 = self.s3.s3
        settings = (
            service,
            s3.endpoint,
            s3.access_key_id,
            s3.secret_access_key,
            s3.token,
            s3.region,
            s3.virtual_hosted_style_request,
        )
        with _LOCK:
            client = _CLIENTS.get(settings)
            if client is None:
                style = "virtual" if s3.virtual_hosted_style_request == "true" else "path"
                client = _CLIENTS[settings] = boto3.session.Session().client(
                    service,
                    endpoint_url=s3.endpoint,
                    aws_access_key_id=s3.access_key_id,
                    aws_secret_access_key=s3.secret_access_key,
                    aws_session_token=s3.token,
                    region_name=s3.region,
                    config=Config(s3={"addressing_style": style}),
                )
            return client


def _code(error: ClientError) -> str:
    return error.response.get("Error", {}).get("Code", "")


def _refused(path: str, error: ClientError) -> OSError:
    """What the S3 API's refusal means for the file at `path`."""
    code = _code(error)
    if code in _MISSING:
        return FileNotFoundError(errno.ENOENT, "no such object", path)
    if code in ("PreconditionFailed", "412"):
        return LandingFileError(path, "replaced since it was listed")
    return LandingFileError(path, f"cannot be read ({code})")


def _stat_of(listed: dict, root: int) -> FileStat:
    """A listing entry's facts, its key less the first `root` characters (the root's
    prefix)."""
    return FileStat(
        listed["Key"][root:], listed["Size"], _seconds_ns(listed["LastModified"]), listed["ETag"]
    )


def _seconds_ns(modified: dt.datetime) -> int:
    """An object's last-modified time in nanoseconds, to the whole second: what S3 keeps
    and `HeadObject` says, where some servers' listings add milliseconds. A listing and a
    lookup of an unchanged object then agree."""
    return (modified - _EPOCH) // dt.timedelta(seconds=1) * 1_000_000_000
