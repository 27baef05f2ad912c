"""Streaming reads that resume where a broken connection left them, pinned to the object's ETag;
and the continuation markers of paged listings.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

from botocore.exceptions import IncompleteReadError

READ_BUFFER = 1 << 20


def next_token(page: Any) -> dict[str, str] | None:
    if not page.get("IsTruncated"):
        return None
    return {"ContinuationToken": str(page["NextContinuationToken"])}


def next_upload_marker(page: Any) -> dict[str, str] | None:
    if not page.get("IsTruncated"):
        return None
    return {"KeyMarker": str(page["NextKeyMarker"]), "UploadIdMarker": str(page.get("NextUploadIdMarker", ""))}


def next_part_marker(page: Any) -> dict[str, str] | None:
    if not page.get("IsTruncated"):
        return None
    return {"PartNumberMarker": str(page["NextPartNumberMarker"])}


#: Opens the object's body again from a position, pinned to the first response's ETag.
Reopen = Callable[[int], Any]
#: Runs one read attempt under the storage's retry policy (its deadline, its error messages).
Retried = Callable[[Callable[[], int]], int]


class ResumableBody(io.RawIOBase):
    """An object's bytes [position, end): a broken, stalled or cut-off connection is reopened
    at the current position (``reopen``: If-Match the first response's ETag, so a concurrent
    overwrite is an error rather than a splice of two versions) under the storage's retry policy
    (``retried``). The storage hands both in, so this module needs nothing of it."""

    def __init__(self, position: int, end: int, body: Any, *, reopen: Reopen, retried: Retried) -> None:
        self._position = position
        self._end = end
        self._body: Any = body
        self._reopen = reopen
        self._retried = retried

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if not len(view) or self._position >= self._end:
            self._drop()
            return 0

        def attempt() -> int:
            if self._body is None:
                self._body = self._reopen(self._position)
            try:
                n = int(self._body.readinto(view[: self._end - self._position]))
                if n == 0:
                    raise IncompleteReadError(actual_bytes=self._position, expected_bytes=self._end)
                return n
            except BaseException:
                self._drop()
                raise

        n = self._retried(attempt)
        self._position += n
        return n

    def readall(self) -> bytes:
        """The rest of the object in 1 MiB reads (RawIOBase's default reads 8 KiB at a time)."""
        out = bytearray()
        chunk = bytearray(READ_BUFFER)
        while n := self.readinto(chunk):
            out += memoryview(chunk)[:n]
        return bytes(out)

    def _drop(self) -> None:
        if self._body is not None:
            body, self._body = self._body, None
            body.close()

    def close(self) -> None:
        self._drop()
        super().close()
