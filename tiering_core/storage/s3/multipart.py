"""Streamed multipart uploads: each part is a window onto the file that checksums bytes the first
time they pass, so memory stays bounded whatever the part size, a retried part is re-sent from
its window, and the part CRCs combine into the object's CRC-32C. The parts go up in parallel and
stop together (``send_parts``); the ETag S3 derives from them recognises a completed upload.

Apart from the client (``client.py``) because none of this calls S3: the client hands in how a
part is sent, how the upload completes and how it is aborted.
"""

from __future__ import annotations

import base64
import hashlib
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tiering_core.storage.checksum import crc32c
from tiering_core.storage.errors import RemoteStorageError
from tiering_core.storage.objects import Progress

CRC_CHUNK = 1 << 20  # per read of the checksum pass over a window
WAIT_POLL = 0.1  # seconds between checks for an exception raised in the waiting thread


class Abandoned(Exception):
    """A part not started, or stopped mid-send, because the upload was abandoned."""


@dataclass
class PartsInFlight:
    """Shared by the parts of one multipart upload (under ``lock``)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)
    running: int = 0
    aborting: bool = False


def locked(progress: Progress | None) -> Progress | None:
    """Parts report progress from several threads; the caller's callback sees one at a time."""
    if progress is None:
        return None
    lock = threading.Lock()

    def report(n: int) -> None:
        with lock:
            progress(n)

    return report


class Window:
    """A seekable, read-only view of ``length`` bytes of a file from ``offset``: the request
    body of one PutObject or UploadPart. Progress counts each byte the first time it is sent;
    ``take`` (the upload quota) every byte each time it is sent, before it goes out (a retried part
    is sent again); once ``stop`` is set, the next read raises, so an upload being abandoned ends
    mid-part."""

    def __init__(
        self,
        fd: int,
        offset: int,
        length: int,
        progress: Progress | None,
        stop: threading.Event | None,
        take: Callable[[int], object] | None = None,
    ) -> None:
        self._take = take
        self._fd = fd
        self._offset = offset
        self._length = length
        self._progress = progress
        self._stop = stop
        self._pos = 0
        self._reported = 0

    def __len__(self) -> int:
        return self._length

    def read(self, n: int = -1) -> bytes:
        if self._stop is not None and self._stop.is_set():
            raise Abandoned()
        remaining = self._length - self._pos
        if n is None or n < 0 or n > remaining:
            n = remaining
        if n <= 0:
            return b""
        if self._take is not None:
            self._take(n)
            if self._stop is not None and self._stop.is_set():
                raise Abandoned()
        data = os.pread(self._fd, n, self._offset + self._pos)
        if len(data) < n:
            raise RemoteStorageError(f"file shrank while uploading: wanted {n} bytes at {self._offset + self._pos}")
        self._pos += n
        if self._progress and self._pos > self._reported:
            self._progress(self._pos - self._reported)
            self._reported = self._pos
        return data

    def seek(self, position: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self._length}[whence]
        self._pos = max(0, min(self._length, base + position))
        return self._pos

    def tell(self) -> int:
        return self._pos

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True


def window_crc(fd: int, offset: int, length: int, path: Path) -> int:
    """CRC-32C of ``length`` bytes of the file from ``offset``, read into one reused buffer."""
    buffer = memoryview(bytearray(min(CRC_CHUNK, max(length, 1))))
    crc = done = 0
    while done < length:
        n = os.preadv(fd, [buffer[: min(len(buffer), length - done)]], offset + done)
        if n == 0:
            raise RemoteStorageError(f"{path}: file shrank while uploading: it ends at {offset + done} bytes")
        crc = crc32c(buffer[:n], crc)
        done += n
    return crc


def b64(crc: int) -> str:
    """A CRC-32C as S3's ``x-amz-checksum-crc32c`` header spells it: base64 of 4 big-endian bytes."""
    return base64.b64encode((crc & 0xFFFFFFFF).to_bytes(4, "big")).decode()


def multipart_etag(parts: Sequence[dict[str, Any]]) -> str | None:
    """The ETag S3 gives the object of a completed multipart upload: the MD5 of its parts' MD5s
    and ``-N``; None when the part ETags are not MD5s (no way to recognise the object)."""
    try:
        digests = b"".join(bytes.fromhex(str(p["ETag"]).strip('"')) for p in parts)
    except ValueError:
        return None
    return f'"{hashlib.md5(digests, usedforsecurity=False).hexdigest()}-{len(parts)}"'


def send_parts(
    windows: list[tuple[int, int, int]],
    send: Callable[[int, int, int, threading.Event], tuple[int, str]],
    complete: Callable[[list[tuple[int, str]]], None],
    abort: Callable[[], None],
    concurrency: int,
) -> list[tuple[int, str]]:
    """Each (part number, offset, length) sent in parallel by ``send`` (its CRC-32C and ETag),
    then ``complete`` with the results in part order; returns them.

    Any failure, or an exception raised in this thread while it waits (KeyboardInterrupt,
    a signal handler's SystemExit), stops the upload at once: no new part starts, parts
    in flight end at their next read, queued ones are cancelled, and the upload is
    aborted before the exception goes on. A part S3 was still receiving may be accepted
    after the abort, so the last part in flight to end aborts the upload once more.
    """
    parts = PartsInFlight()

    def upload_part(number: int, offset: int, length: int) -> tuple[int, str]:
        with parts.lock:
            if parts.stop.is_set():  # another part failed for good, or the upload was stopped
                raise Abandoned()
            parts.running += 1
        try:
            return send(number, offset, length, parts.stop)
        except BaseException:
            parts.stop.set()
            raise
        finally:
            with parts.lock:
                parts.running -= 1
                abort_again = parts.aborting and parts.running == 0
            if abort_again:
                abort()

    pool = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="s3-part")
    futures: list[Future[tuple[int, str]]] = []
    try:
        futures = [pool.submit(upload_part, number, off, length) for number, off, length in windows]
        pending = set(futures)
        while pending and not parts.stop.is_set():
            # a bounded wait, so that an exception meant for this thread is raised promptly
            _, pending = wait(pending, timeout=WAIT_POLL, return_when=FIRST_EXCEPTION)
        if parts.stop.is_set():
            wait(futures)  # those in flight end at their next read; the rest never start
            errors = [f.exception() for f in futures if not f.cancelled()]
            raise next(e for e in errors if e is not None and not isinstance(e, Abandoned))
        results = [f.result() for f in futures]
        complete(results)
    except BaseException:
        parts.stop.set()
        for f in futures:
            f.cancel()
        pool.shutdown(wait=False, cancel_futures=True)
        with parts.lock:
            parts.aborting = True
        abort()
        raise
    pool.shutdown(wait=False)
    return results
