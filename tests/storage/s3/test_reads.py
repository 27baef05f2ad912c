"""A streaming read resumes where a broken, stalled or cut-off connection left it, under the
storage's retry policy, and yields the object's bytes exactly once each; and the continuation
markers of paged listings. The connections are byte streams; their faults are injected."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import IncompleteReadError

from tiering_core.storage.s3.reads import (
    READ_BUFFER,
    ResumableBody,
    next_part_marker,
    next_token,
    next_upload_marker,
)

OBJECT = bytes(range(256)) * 9000  # 2.3 MB: more than two READ_BUFFERs


class Connection(io.BytesIO):
    """The object's bytes from a position; after ``breaks_after`` bytes it raises (a reset) or,
    with ``cut``, ends early as a connection closed mid-body does."""

    def __init__(self, start: int, breaks_after: int | None = None, cut: bool = False) -> None:
        super().__init__(OBJECT[start:])
        self.left = breaks_after
        self.cut = cut

    def readinto(self, buffer: Any) -> int:
        if self.left is not None and self.left <= 0:
            if self.cut:
                return 0
            raise ConnectionResetError("connection reset by peer")
        view = memoryview(buffer)
        if self.left is not None:
            view = view[: self.left]
        n = super().readinto(view)
        if self.left is not None:
            self.left -= n
        return n


def retrying(attempts: int) -> tuple[Callable[[Callable[[], int]], int], list[BaseException]]:
    """A retry policy of ``attempts`` tries, recording each failure it retried."""
    failures: list[BaseException] = []

    def retried(attempt: Callable[[], int]) -> int:
        for _ in range(attempts - 1):
            try:
                return attempt()
            except (ConnectionResetError, IncompleteReadError) as exc:
                failures.append(exc)
        return attempt()

    return retried, failures


def test_an_unbroken_read_is_the_range_in_buffer_sized_reads() -> None:
    reopened: list[int] = []
    retried, failures = retrying(1)
    body = ResumableBody(100, len(OBJECT), Connection(100), reopen=reopened.append, retried=retried)
    assert body.readall() == OBJECT[100:]
    assert (reopened, failures) == ([], [])
    assert READ_BUFFER == 1 << 20


def test_a_range_ends_at_its_end_not_the_connection_s() -> None:
    retried, _ = retrying(1)
    body = ResumableBody(10, 20, Connection(10), reopen=lambda at: Connection(at), retried=retried)
    assert body.read(100) == OBJECT[10:20] and body.read(1) == b""


@pytest.mark.parametrize("cut", [False, True], ids=["reset", "cut-off"])
def test_a_broken_connection_is_reopened_at_the_current_position(cut: bool) -> None:
    reopened: list[int] = []

    def reopen(at: int) -> Connection:
        reopened.append(at)
        return Connection(at, breaks_after=700_000, cut=cut)

    retried, failures = retrying(2)
    first = Connection(0, breaks_after=1_000_000, cut=cut)
    body = ResumableBody(0, len(OBJECT), first, reopen=reopen, retried=retried)
    assert body.readall() == OBJECT
    assert reopened == [1_000_000 + 700_000 * n for n in range(len(reopened))]
    assert len(reopened) == -(-(len(OBJECT) - 1_000_000) // 700_000)
    assert len(failures) == len(reopened) and first.closed
    kinds = {type(f) for f in failures}
    assert kinds == ({IncompleteReadError} if cut else {ConnectionResetError})


def test_a_failure_the_policy_gives_up_on_is_raised_and_the_connection_closed() -> None:
    retried, _ = retrying(1)
    first = Connection(0, breaks_after=10)
    body = ResumableBody(0, len(OBJECT), first, reopen=lambda at: Connection(at, breaks_after=0), retried=retried)
    assert body.read(10) == OBJECT[:10]
    with pytest.raises(ConnectionResetError):
        body.read(10)
    assert first.closed
    body.close()


def test_the_connection_is_closed_at_the_end_and_on_close() -> None:
    retried, _ = retrying(1)
    done = Connection(0)
    body = ResumableBody(0, 5, done, reopen=lambda at: Connection(at), retried=retried)
    assert body.read(5) == OBJECT[:5] and not done.closed
    assert body.read(5) == b"" and done.closed
    open_one = Connection(0)
    ResumableBody(0, 5, open_one, reopen=lambda at: Connection(at), retried=retried).close()
    assert open_one.closed


def test_listing_markers_continue_a_truncated_page_only() -> None:
    assert next_token({"IsTruncated": False, "NextContinuationToken": "t"}) is None
    assert next_token({"IsTruncated": True, "NextContinuationToken": "t1"}) == {"ContinuationToken": "t1"}
    assert next_upload_marker({}) is None
    assert next_upload_marker({"IsTruncated": True, "NextKeyMarker": "k"}) == {"KeyMarker": "k", "UploadIdMarker": ""}
    assert next_upload_marker({"IsTruncated": True, "NextKeyMarker": "k", "NextUploadIdMarker": "u"}) == {
        "KeyMarker": "k",
        "UploadIdMarker": "u",
    }
    assert next_part_marker({"IsTruncated": True, "NextPartNumberMarker": 7}) == {"PartNumberMarker": "7"}
    assert next_part_marker({"IsTruncated": False}) is None
