"""Filesystem backend: same key layout under a root; temp file, fsync, atomic rename, fsync dir.

A reader never sees a partly written object: each one is written to a temporary name in
its final directory and renamed over the key once its bytes are on disk.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from tiering_core.storage.base import Progress, RemoteObject, RemoteStorage
from tiering_core.storage.checksum import crc32c
from tiering_core.storage.errors import InvalidRangeError, RemoteObjectNotFoundError, RemoteStorageError

CHUNK = 1 << 20
COPY_CHUNK = 16 << 20  # per in-kernel copy and checksummed window
TEMP_PREFIX = ".tmp-"


class FilesystemRemoteStorage(RemoteStorage):
    def __init__(self, root: Path, *, prefix: str = "") -> None:
        super().__init__(prefix)
        self.root = Path(root).resolve()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RemoteStorageError(f"filesystem {self.root}: cannot create the root: {exc}") from exc

    def describe(self, key: str) -> str:
        return f"filesystem {self.root}: {key}"

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if path == self.root or not path.is_relative_to(self.root):
            raise RemoteStorageError(f"{self.describe(key)}: key leaves the root")
        return path

    def put_object(self, key: str, source: Path | bytes, progress: Progress | None = None) -> tuple[int, int]:
        path = self._path(key)
        tmp = path.with_name(f"{TEMP_PREFIX}{path.name}.{uuid.uuid4().hex}")
        try:
            out = _create(tmp)
            try:
                try:
                    if isinstance(source, bytes):
                        _write_all(out, memoryview(source))
                        size, crc = len(source), crc32c(source)
                        if progress:
                            progress(size)
                    else:
                        size, crc = _copy_checksummed(Path(source), out, progress)
                    os.fsync(out)
                finally:
                    os.close(out)
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
            _fsync_dir(path.parent)
            return size, crc
        except OSError as exc:
            raise RemoteStorageError(f"{self.describe(key)}: put failed: {exc}") from exc

    def get_range(self, key: str, start: int, end: int | None) -> bytes:
        f, size = self._open(key, start)
        with f:
            last = size - 1 if end is None else min(end, size - 1)
            return os.pread(f.fileno(), max(0, last - start + 1), start)

    def open_object(self, key: str, start: int = 0) -> BinaryIO:
        f, _ = self._open(key, start)
        f.seek(start)
        return f

    def _open(self, key: str, start: int) -> tuple[BinaryIO, int]:
        """The open object and its size, once ``start`` is known to be inside it."""
        try:
            f = self._path(key).open("rb")
        except (FileNotFoundError, NotADirectoryError):
            raise RemoteObjectNotFoundError(f"{self.describe(key)}: object not found") from None
        except OSError as exc:
            raise RemoteStorageError(f"{self.describe(key)}: open failed: {exc}") from exc
        size = os.fstat(f.fileno()).st_size
        if start >= size and not (start == 0 and size == 0):
            f.close()
            raise InvalidRangeError(f"{self.describe(key)}: range start {start} is beyond the object's {size} bytes")
        return f, size

    def object_size(self, key: str) -> int | None:
        try:
            return self._path(key).stat().st_size
        except (FileNotFoundError, NotADirectoryError):
            return None

    def delete_keys(self, keys: Iterable[str]) -> None:
        parents: set[Path] = set()
        for key in keys:
            path = self._path(key)
            try:
                path.unlink()
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as exc:
                raise RemoteStorageError(f"{self.describe(key)}: delete failed: {exc}") from exc
            parents.add(path.parent)
        for parent in parents:
            self._prune(parent)

    def _prune(self, directory: Path) -> None:
        """Remove directories a delete left empty (as S3 has none), up to the root; a
        directory that is not empty, or that a concurrent put just created, stays."""
        while directory != self.root and directory.is_relative_to(self.root):
            try:
                directory.rmdir()
            except OSError:
                return
            directory = directory.parent

    def list_prefix(self, prefix: str) -> list[RemoteObject]:
        head = prefix.rpartition("/")[0]  # the deepest directory every matching key lies under
        directory = self._path(head) if head else self.root
        found = []
        for dirpath, _dirs, names in os.walk(directory):
            for name in names:
                if name.startswith(TEMP_PREFIX):
                    continue
                path = Path(dirpath, name)
                key = path.relative_to(self.root).as_posix()
                if not key.startswith(prefix):
                    continue
                try:
                    stat = path.stat()
                except FileNotFoundError:  # deleted while listing
                    continue
                found.append(RemoteObject(key, stat.st_size, datetime.fromtimestamp(stat.st_mtime, tz=UTC)))
        return sorted(found, key=lambda o: o.key)


def _create(tmp: Path) -> int:
    """A new temp file (mode 0666 less the umask, like any copied file); retried if a
    concurrent delete pruned the directory between mkdir and create."""
    attempts = 0
    while True:
        _make_dirs(tmp.parent)
        try:
            return os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        except FileNotFoundError:
            attempts += 1
            if attempts >= 3:
                raise


def _make_dirs(directory: Path) -> None:
    """mkdir -p, with each new directory's entry made durable in its parent."""
    missing = []
    while not directory.is_dir():
        missing.append(directory)
        directory = directory.parent
    for new in reversed(missing):
        with contextlib.suppress(FileExistsError):
            new.mkdir()
        _fsync_dir(new.parent)


def _copy_checksummed(source: Path, out: int, progress: Progress | None) -> tuple[int, int]:
    """Copy ``source`` into ``out`` chunk by chunk, file to file inside the kernel, and take
    each chunk's CRC-32C over the bytes just written, through a read-only mapping of our own
    temp file. The data is copied once (not to user space and back) and the source is read
    once; the checksum describes exactly the bytes stored. Mapping the temp file, never the
    source, keeps a source truncated meanwhile an error (``copy`` comes up short), not SIGBUS."""
    crc = 0
    with open(source, "rb", buffering=0) as src:
        size = os.fstat(src.fileno()).st_size
        copier = _KernelCopy(src.fileno(), out)
        for offset in range(0, size, COPY_CHUNK):
            n = min(COPY_CHUNK, size - offset)
            copier.copy(offset, n)
            with mmap.mmap(out, n, access=mmap.ACCESS_READ, offset=offset) as window, memoryview(window) as view:
                crc = crc32c(view, crc)
            if progress:
                progress(n)
    return size, crc


class _KernelCopy:
    """``copy_file_range`` (in-kernel, a reflink or server-side copy where the filesystem can),
    else ``sendfile`` (other filesystems, as shutil does), else pread/pwrite."""

    MODES = ("copy_file_range", "sendfile", "pwrite")
    _FALLBACK_ERRNOS = frozenset({errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.ENOTSUP})

    def __init__(self, src: int, dst: int, modes: tuple[str, ...] = MODES) -> None:
        self.src, self.dst = src, dst
        self.modes = list(modes)

    def copy(self, offset: int, count: int) -> None:
        done = 0
        while done < count:
            try:
                n = self._step(offset + done, count - done)
            except OSError as exc:
                if exc.errno not in self._FALLBACK_ERRNOS or len(self.modes) == 1:
                    raise
                self.modes.pop(0)
                continue
            if n == 0:
                raise OSError(errno.EIO, f"source ended at byte {offset + done}, before its size when opened")
            done += n

    def _step(self, position: int, count: int) -> int:
        mode = self.modes[0]
        if mode == "copy_file_range":
            return os.copy_file_range(self.src, self.dst, count, position, position)
        if mode == "sendfile":
            os.lseek(self.dst, position, os.SEEK_SET)
            return os.sendfile(self.dst, self.src, position, count)
        data = os.pread(self.src, min(count, CHUNK), position)
        if data:
            _write_all(self.dst, memoryview(data), position)
        return len(data)


def _write_all(out: int, data: memoryview, position: int | None = None) -> None:
    """Writes may be partial; finish them (at ``position``, or at the file's offset)."""
    while data:
        written = os.write(out, data) if position is None else os.pwrite(out, data, position)
        data = data[written:]
        if position is not None:
            position += written


def _fsync_dir(directory: Path) -> None:
    """The rename is durable only once the directory entry is."""
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
