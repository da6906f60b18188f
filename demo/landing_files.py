"""The demo's deliveries, as writers make them: files written, copied, grown, delivered
again and removed under the landing root, on a local disk or in a bucket alike, through
the pyarrow file system the landing zone gives (`LandingZone.arrow_filesystem`)."""

from __future__ import annotations

from pyarrow import fs as pafs

from resources import LandingZone


class LandingFiles:
    """Files under the landing root, by their paths relative to it."""

    def __init__(self, landing: LandingZone) -> None:
        self.filesystem, self._base = landing.arrow_filesystem()
        self._local = isinstance(self.filesystem, pafs.LocalFileSystem)

    def _full(self, path: str) -> str:
        return f"{self._base}/{path}"

    def write(self, path: str, content: bytes | str) -> str:
        """Lands `content` at `path` whole, at once: an object is put whole; on a disk the
        bytes go to a hidden file beside it, renamed into place. Returns `path`."""
        target = staged = self._full(path)
        if self._local:  # an object store has no folders to make, nor renames to wait for
            folder, name = target.rsplit("/", 1)
            self.filesystem.create_dir(folder, recursive=True)
            staged = f"{folder}/.{name}.tmp"
        with self.filesystem.open_output_stream(staged) as out:
            out.write(content.encode() if isinstance(content, str) else content)
        if staged != target:
            self.filesystem.move(staged, target)
        return path

    def read(self, path: str) -> bytes:
        with self.filesystem.open_input_stream(self._full(path)) as source:
            return source.read()

    def copy(self, source: str, target: str) -> None:
        self.filesystem.copy_file(self._full(source), self._full(target))

    def append(self, path: str, content: str) -> None:
        """The file grown by `content` (an object cannot grow: its writer puts it again)."""
        self.write(path, self.read(path) + content.encode())

    def deliver_again(self, path: str) -> None:
        """The same bytes landed again: a new modification time, nothing changed."""
        self.write(path, self.read(path))

    def remove(self, path: str) -> None:
        self.filesystem.delete_file(self._full(path))

    def remove_folder(self, path: str) -> None:
        """Everything under `path`, if anything."""
        full = self._full(path)
        if self.filesystem.get_file_info(full).type != pafs.FileType.NotFound:
            self.filesystem.delete_dir(full)  # on S3: every key under the prefix
