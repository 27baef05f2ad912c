"""Filesystem backend: same key layout under a root; temp file, fsync, atomic rename, fsync dir.

A reader never sees a partly written object: each one is written to a temporary name in
its final directory and renamed over the key once its bytes are on disk.
"""

from __future__ import annotations

import contextlib
import errno
import io
import mmap
import os
import uuid
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from tiering_core.storage.checksum import crc32c, crc32c_combine
from tiering_core.storage.errors import InvalidRangeError, RemoteObjectNotFoundError, RemoteStorageError
from tiering_core.storage.objects import TEMP_FILE, IncompleteUpload, Progress, RemoteObject
from tiering_core.storage.remote import RemoteStorage

CHUNK = 1 << 20
COPY_CHUNK = 16 << 20  # per in-kernel copy and checksummed window
TEMP_PREFIX = ".tmp-"


class FilesystemRemoteStorage(RemoteStorage):
    def __init__(self, root: Path, *, prefix: str = "") -> None:
        super().__init__(prefix)
        self.root = Path(root).resolve()
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
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
        size, crc = self._put_segment_object(key, source, progress)
        self._sync_segment([key])
        return size, crc

    def _put_segment_object(self, key: str, source: Path | bytes, progress: Progress | None) -> tuple[int, int]:
        """Write ``key`` whole: to a temp file in its directory, fsynced, renamed over the key.
        The directory entry is made durable by :meth:`_sync_segment`, once per directory."""
        path = self._path(key)
        tmp = _temp_name(path)
        if self.quotas.copy is not None:  # taken before the bytes go out, in burst-sized steps
            self.quotas.take_copy(len(source) if isinstance(source, bytes) else _size(source))
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
            return size, crc
        except OSError as exc:
            raise RemoteStorageError(f"{self.describe(key)}: put failed: {exc}") from exc

    def _sync_segment(self, keys: list[str]) -> None:
        """One fsync per directory the renames changed (a journaling filesystem commits them
        in order, so the manifest's entry never becomes durable before its objects')."""
        for directory in dict.fromkeys(self._path(key).parent for key in keys):
            try:
                _fsync_dir(directory)
            except OSError as exc:
                raise RemoteStorageError(f"filesystem {self.root}: cannot sync {directory}: {exc}") from exc

    def get_range(self, key: str, start: int, end: int | None) -> bytes:
        fd, size = self._open(key, start)
        try:
            last = size - 1 if end is None else min(end, size - 1)
            return _pread_exactly(fd, max(0, last - start + 1), start)
        except OSError as exc:
            raise RemoteStorageError(f"{self.describe(key)}: read failed: {exc}") from exc
        finally:
            os.close(fd)

    def open_object(self, key: str, start: int = 0) -> BinaryIO:
        fd, size = self._open(key, start)
        raw = _ObjectFile(fd, start, size, self.describe(key))
        return io.BufferedReader(raw, CHUNK)  # type: ignore[return-value]

    def _open(self, key: str, start: int) -> tuple[int, int]:
        """The open object's descriptor and size, once ``start`` is known to be inside it."""
        try:
            fd = os.open(self._path(key), os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            raise RemoteObjectNotFoundError(f"{self.describe(key)}: object not found") from None
        except OSError as exc:
            raise RemoteStorageError(f"{self.describe(key)}: open failed: {exc}") from exc
        try:
            size = os.fstat(fd).st_size
        except OSError as exc:
            os.close(fd)
            raise RemoteStorageError(f"{self.describe(key)}: stat failed: {exc}") from exc
        if start >= size and not (start == 0 and size == 0):
            os.close(fd)
            raise InvalidRangeError(f"{self.describe(key)}: range start {start} is beyond the object's {size} bytes")
        return fd, size

    def object_size(self, key: str) -> int | None:
        try:
            return self._path(key).stat().st_size
        except (FileNotFoundError, NotADirectoryError):
            return None

    def delete_keys(self, keys: Iterable[str]) -> None:
        """Unlink in the order given (a caller deletes a manifest before its objects), then make
        each changed directory durable: a delete that returned stays done after a crash."""
        parents: dict[Path, None] = {}
        try:
            for key in keys:
                path = self._path(key)
                try:
                    path.unlink()
                except (FileNotFoundError, NotADirectoryError):
                    continue
                except OSError as exc:
                    raise RemoteStorageError(f"{self.describe(key)}: delete failed: {exc}") from exc
                parents[path.parent] = None
        finally:
            self._sync_deletes(parents)

    def _sync_deletes(self, parents: Iterable[Path]) -> None:
        survivors: dict[Path, None] = {}
        for parent in parents:
            survivors[self._prune(parent)] = None
        for directory in survivors:
            try:
                _fsync_dir(directory)
            except OSError as exc:
                raise RemoteStorageError(
                    f"filesystem {self.root}: cannot sync {directory} after a delete: {exc}"
                ) from exc

    def _prune(self, directory: Path) -> Path:
        """Remove directories a delete left empty (as S3 has none), up to the root; a
        directory that is not empty, or that a concurrent put just created, stays. Returns
        the deepest directory left, whose entries changed."""
        while directory != self.root and directory.is_relative_to(self.root):
            try:
                directory.rmdir()
            except OSError:
                return directory
            directory = directory.parent
        return directory

    def list_prefix(self, prefix: str) -> list[RemoteObject]:
        """Objects only: the temp files of unfinished writes are :meth:`list_incomplete_uploads`'."""
        return [RemoteObject(key, size, mtime) for key, size, mtime in self._walk(prefix) if not _is_temp(key)]

    def list_incomplete_uploads(self, prefix: str) -> list[IncompleteUpload]:
        """Temp files of writes that never finished; one being written now is among them, but
        its last write is recent, so an age threshold keeps it."""
        return [
            IncompleteUpload(TEMP_FILE, key, _temp_target(key), mtime, size)
            for key, size, mtime in self._walk(prefix)
            if _is_temp(key)
        ]

    def remove_incomplete_upload(self, upload: IncompleteUpload) -> None:
        if upload.kind != TEMP_FILE or not _is_temp(upload.key):
            raise RemoteStorageError(f"{self.describe(upload.key)}: not a temp file of this backend")
        self.delete_keys([upload.key])

    def list_child_prefixes(self, prefix: str) -> list[str]:
        head, _, start = prefix.rpartition("/")
        directory = self._path(head) if head else self.root
        lead = f"{head}/" if head else ""
        try:
            with os.scandir(directory) as entries:
                return sorted(
                    f"{lead}{e.name}/" for e in entries if e.name.startswith(start) and e.is_dir(follow_symlinks=False)
                )
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise RemoteStorageError(f"{self.describe(prefix)}: listing failed: {exc}") from exc

    def _walk(self, prefix: str) -> list[tuple[str, int, datetime]]:
        """(key, size, mtime) of every file whose key starts with ``prefix``, sorted by key."""
        head = prefix.rpartition("/")[0]  # the deepest directory every matching key lies under
        directory = self._path(head) if head else self.root
        found = []
        for dirpath, _dirs, names in os.walk(directory):
            for name in names:
                path = Path(dirpath, name)
                key = path.relative_to(self.root).as_posix()
                if not key.startswith(prefix):
                    continue
                try:
                    stat = path.stat()
                except FileNotFoundError:  # deleted while listing
                    continue
                found.append((key, stat.st_size, datetime.fromtimestamp(stat.st_mtime, tz=UTC)))
        return sorted(found)


def _is_temp(key: str) -> bool:
    return key.rpartition("/")[2].startswith(TEMP_PREFIX)


def _temp_name(path: Path) -> Path:
    """Where ``path`` is written before it is renamed over: ``.tmp-<name>.<random hex>``."""
    return path.with_name(f"{TEMP_PREFIX}{path.name}.{uuid.uuid4().hex}")


def _temp_target(key: str) -> str:
    """The key a temp file (see :func:`_temp_name`) was to be renamed to."""
    head, slash, name = key.rpartition("/")
    return f"{head}{slash}{name[len(TEMP_PREFIX) :].rpartition('.')[0]}"


def _create(tmp: Path) -> int:
    """A new temp file, mode 0600: tiered data is the broker's, readable by the platform's user
    only; retried if a concurrent delete pruned the directory between mkdir and create."""
    attempts = 0
    while True:
        _make_dirs(tmp.parent)
        try:
            return os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:
            attempts += 1
            if attempts >= 3:
                raise


def _make_dirs(directory: Path) -> None:
    """mkdir -p (mode 0700), with each new directory's entry made durable in its parent."""
    missing = []
    while not directory.is_dir():
        missing.append(directory)
        directory = directory.parent
    for new in reversed(missing):
        with contextlib.suppress(FileExistsError):
            new.mkdir(mode=0o700)
        _fsync_dir(new.parent)


def _copy_checksummed(source: Path, out: int, progress: Progress | None) -> tuple[int, int]:
    """Copy ``source`` into ``out`` chunk by chunk, file to file inside the kernel, and take
    each chunk's CRC-32C over the bytes just written, through a read-only mapping of our own
    temp file. The data is copied once (not to user space and back) and the source is read
    once; the checksum describes exactly the bytes stored. Mapping the temp file, never the
    source, keeps a source truncated meanwhile an error (``copy`` comes up short), not SIGBUS.

    A chunk is checksummed on a second thread while the kernel copies the next one, so a
    large object costs about the copy alone, not the copy plus a checksum pass.
    """
    with open(source, "rb", buffering=0) as src:
        size = os.fstat(src.fileno()).st_size
        copier = KernelCopy(src.fileno(), out)
        if size <= COPY_CHUNK:
            copier.copy(0, size)
            crc = _mapped_crc(out, 0, size)
            if progress:
                progress(size)
            return size, crc
        crc = 0
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="fs-crc") as checksums:
            previous: Future[int] | None = None
            try:
                for offset in range(0, size, COPY_CHUNK):
                    n = min(COPY_CHUNK, size - offset)
                    copier.copy(offset, n)
                    if previous is not None:
                        crc = crc32c_combine(crc, previous.result(), COPY_CHUNK)
                    previous = checksums.submit(_mapped_crc, out, offset, n)
                    if progress:
                        progress(n)
                assert previous is not None
                last = size - (size - 1) // COPY_CHUNK * COPY_CHUNK
                crc = crc32c_combine(crc, previous.result(), last)
            except BaseException:
                if previous is not None:
                    previous.cancel()
                raise
    return size, crc


def _mapped_crc(fd: int, offset: int, length: int) -> int:
    """CRC-32C of ``length`` bytes of ``fd`` from ``offset`` (a multiple of the page size)."""
    if length == 0:
        return 0
    with mmap.mmap(fd, length, access=mmap.ACCESS_READ, offset=offset) as window, memoryview(window) as view:
        return crc32c(view)


class KernelCopy:
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


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0  # the copy itself reports the file's trouble


def _pread_exactly(fd: int, length: int, position: int) -> bytes:
    """``length`` bytes from ``position``: one pread returns at most 0x7ffff000 bytes on Linux
    (and may return fewer for any reason), so read until all are in."""
    first = os.pread(fd, length, position)
    if len(first) == length:
        return first
    chunks, done = [first], len(first)
    while done < length:
        chunk = os.pread(fd, length - done, position + done)
        if not chunk:
            raise OSError(errno.EIO, f"object ended at byte {position + done}, before its size when opened")
        chunks.append(chunk)
        done += len(chunk)
    return b"".join(chunks)


class _ObjectFile(io.RawIOBase):
    """An object's bytes from ``position`` to ``end`` through positioned reads, with read
    errors raised as RemoteStorageError like every other storage failure."""

    def __init__(self, fd: int, position: int, end: int, where: str) -> None:
        self._fd = fd
        self._position = position
        self._end = end
        self._where = where

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        want = min(len(view), self._end - self._position)
        if want <= 0:
            return 0
        try:
            n = os.preadv(self._fd, [view[:want]], self._position)
        except OSError as exc:
            raise RemoteStorageError(f"{self._where}: read failed: {exc}") from exc
        if n == 0:
            raise RemoteStorageError(
                f"{self._where}: object ended at byte {self._position}, before its size when opened"
            )
        self._position += n
        return n

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


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
