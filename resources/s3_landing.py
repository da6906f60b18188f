"""A landing zone in an object store: source files land as objects under `s3://bucket/prefix`.

What a local landing zone does with a directory listing, a stat and a read, this one does
with the S3 API, through boto3:
- a listing is `ListObjectsV2`, paged (`page_size` keys a request): every key's size,
  last-modified time and entity tag (ETag) come with the page, so unchanged files cost
  no request of their own, and a changed ETag (a replaced object) is seen even where
  size and time are equal;
- a header line is a ranged `GetObject` (`Range: bytes=0-4095`), and so is what of a
  growing file a run on Spark's executors reads;
- Spark reads the files through S3A (`s3a://`), configured from the same settings.

An object store raises no notification a sensor can follow without a queue of its own
(S3 event notifications into SQS): a sensor lists its folders whole at every tick, one
request per 1,000 keys.

This module is imported only where an `s3://` landing root is configured: it loads the
object-store settings (`resources/object_store.py`) and boto3.
"""

from __future__ import annotations

import builtins
import datetime as dt
import errno
import posixpath
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError
from pyarrow import fs as pafs
from pydantic import Field

from resources.landing import (
    FileStat,
    Fingerprint,
    LandedFile,
    LandingFileError,
    LandingZone,
    in_progress,
    landed,
)
from resources.object_store import S3Storage
from resources.object_uri import object_path

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MISSING = {"NoSuchKey", "404", "NotFound"}
_CLIENTS: dict[tuple, Any] = {}
_LOCK = threading.Lock()
READERS = 16
"""Objects a sensor's tick reads at once (new or changed ones, to hash them)."""


class S3LandingZone(LandingZone):
    """Source files under an `s3://bucket/prefix` root (see the module)."""

    local: ClassVar[bool] = False
    s3: S3Storage = S3Storage()
    """Endpoint and credentials (unset fields: the AWS_* environment)."""
    page_size: int = Field(
        default=1000, ge=1, le=1000, description="Keys asked for in each listing request."
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
        found = []
        for listed in self._objects(start, delimiter=not recursive):
            parts = listed["Key"][len(start) :].split("/")
            name = parts[-1]
            if not name.endswith(suffix) or any(in_progress(p, suffix) for p in parts):
                continue
            if any(suffix and p.endswith(suffix) for p in parts[:-1]):
                continue  # under a "folder" named like a file
            found.append(_stat_of(listed, root))
        return sorted(found, key=lambda s: s.path)

    def _objects(self, start: str, *, delimiter: bool = False) -> Iterator[dict]:
        pages = (
            self._client()
            .get_paginator("list_objects_v2")
            .paginate(
                Bucket=self._bucket,
                Prefix=start,
                **({"Delimiter": "/"} if delimiter else {}),
                PaginationConfig={"PageSize": self.page_size},
            )
        )
        for page in pages:
            for listed in page.get("Contents", ()):
                if not listed["Key"].endswith("/"):  # a console's "folder" marker
                    yield listed

    def listed(self, path: str) -> FileStat | None:
        return self.stat(path)

    def stat(self, path: str) -> FileStat | None:
        """The listing facts of one object (None when there is none), from a listing
        request: a `HeadObject` gives the time to the second only, where listings (and
        Spark, which lists) give milliseconds."""
        key = self._key(path)
        try:
            page = self._client().list_objects_v2(Bucket=self._bucket, Prefix=key, MaxKeys=1)
        except ClientError as error:
            raise _refused(path, error) from error
        first = next(iter(page.get("Contents", ())), None)
        if first is None or first["Key"] != key:
            return None
        return _stat_of(first, len(self._prefix))

    def exists(self, path: str) -> bool:
        return self.stat(path) is not None

    # -- reading ------------------------------------------------------------------------

    def head(self, path: str, size: int = 4096) -> bytes:
        if size <= 0:
            return b""
        return self._get(path, Range=f"bytes=0-{size - 1}")[0]

    def read(
        self, path: str, *, prefixes: Callable[[bytes], Iterable[int]] | None = None
    ) -> LandedFile:
        listed = self.stat(path)
        if listed is None:
            raise FileNotFoundError(errno.ENOENT, "no such object", path)
        return self._read_listed(listed, prefixes)

    def _hashed(self, stat: FileStat) -> Fingerprint:
        return self._read_listed(stat, None).fingerprint

    def _read_listed(
        self, stat: FileStat, prefixes: Callable[[bytes], Iterable[int]] | None
    ) -> LandedFile:
        """The listed object, read only if its ETag is still the listed one (`If-Match`):
        the listing's facts (its time to the millisecond, where a read's headers give
        seconds) are the bytes'. One replaced since is refused, named, and looked at again
        by the next listing."""
        content, etag = self._get(stat.path, IfMatch=stat.etag or "*")
        return landed(stat.path, content, stat.mtime_ns, prefixes, etag)

    @staticmethod
    def _each(
        work: Callable[[FileStat], Fingerprint | None], stats: Sequence[FileStat]
    ) -> Iterable[Fingerprint | None]:
        """Objects are read side by side (a request waits on the network, not the CPU)."""
        if len(stats) < 2:
            return map(work, stats)
        with ThreadPoolExecutor(max_workers=READERS) as pool:
            return builtins.list(pool.map(work, stats))

    def _get(self, path: str, **ranged: str) -> tuple[bytes, str]:
        try:
            response = self._client().get_object(Bucket=self._bucket, Key=self._key(path), **ranged)
        except ClientError as error:
            if _code(error) == "InvalidRange":  # a range of an empty object
                return b"", ""
            raise _refused(path, error) from error
        with response["Body"] as body:
            return body.read(), response["ETag"]

    def _client(self) -> Any:
        """One boto3 client per process and settings (clients are thread-safe; making
        one costs tens of milliseconds)."""
        s3 = self.s3.s3
        settings = (
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
                    "s3",
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
    modified = (listed["LastModified"] - _EPOCH) // dt.timedelta(microseconds=1)
    return FileStat(listed["Key"][root:], listed["Size"], modified * 1000, listed["ETag"])
