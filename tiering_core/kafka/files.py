"""Opening a broker's files: regular files only, never through a symbolic link, and whole-file
reads bounded by the kind of file.

Whoever can write a log dir (or a careless operator) can leave a FIFO where a checkpoint or an
index belongs (opening it would wait for a writer for ever, reading it would never end), a
device, or a sparse file of gigabytes (reading it whole would exhaust memory). Every broker file
is therefore opened with ``O_NONBLOCK`` (opening a FIFO does not wait) and ``fstat``-ed before
anything is read: anything but a regular file is a ``CorruptLogError`` naming it. Files read
whole (checkpoints, ``partition.metadata``, indexes, producer snapshots) are refused above a
limit far beyond what a broker writes, before a byte is read. A broker never makes symbolic
links in a partition directory: one there (an ``.index`` pointing at a file only root may read,
say) is refused by ``O_NOFOLLOW``, so what it points at is never read, nor uploaded.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from tiering_core.errors import CorruptLogError

_MIB = 1024 * 1024
#: ``replication-offset-checkpoint`` & co. hold a line per partition of the broker, and a
#: ``leader-epoch-checkpoint`` a line per epoch: a few dozen bytes each, millions of lines fit.
CHECKPOINT_READ_LIMIT = 64 * _MIB
#: ``partition.metadata`` is two short lines.
PARTITION_METADATA_READ_LIMIT = 64 * 1024
#: ``.index``/``.timeindex``/``.txnindex``: the broker caps them at ``segment.index.bytes``
#: (10 MiB by default).
INDEX_READ_LIMIT = 64 * _MIB
#: A producer snapshot holds 50 bytes per producer id.
SNAPSHOT_READ_LIMIT = 256 * _MIB
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC


class NotARegularFileError(CorruptLogError):
    """A broker file that is a symbolic link, a FIFO, a device, a directory or a socket: never read."""


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_regular(path: Path) -> int:
    """A read-only descriptor on the regular file at ``path`` (``FileNotFoundError`` passes through)."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotARegularFileError(path, 0, "is a symbolic link, not a regular file: not followed") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotARegularFileError(path, 0, f"is {_kind(mode)}, not a regular file: not read")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: Path, limit: int, what: str) -> bytes:
    """The whole regular file at ``path``, refused (``CorruptLogError``) when larger than ``limit``.

    The size is checked before reading and the read stops one byte past ``limit``, so a file
    growing meanwhile is refused too.
    """
    path = Path(path)
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise CorruptLogError(path, 0, f"{what} is {size} bytes, more than the {limit} such a file can hold")
        chunks: list[bytes] = []
        read = 0
        while read <= limit:
            chunk = os.pread(fd, min(limit + 1 - read, 4 * _MIB), read)
            if not chunk:
                break
            chunks.append(chunk)
            read += len(chunk)
        if read > limit:
            raise CorruptLogError(path, 0, f"{what} grew past the {limit} bytes such a file can hold")
        return b"".join(chunks)
    finally:
        os.close(fd)
