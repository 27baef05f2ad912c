"""Streamed multipart uploads without S3: a part's window reads its bytes of the file, counts each
byte's progress once and its quota each time it is sent, and ends at its next read once the
upload is abandoned; a window's CRC-32C over any chunk size; S3's header and multipart ETag; parts
sent in parallel completed in part order, and one failure stopping the rest and aborting the
upload with the failure itself raised."""

from __future__ import annotations

import base64
import hashlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import tiering_core.storage.s3.multipart as multipart
from tiering_core.storage.checksum import crc32c
from tiering_core.storage.errors import RemoteStorageError
from tiering_core.storage.s3.multipart import Abandoned, Window, b64, locked, multipart_etag, send_parts, window_crc

DATA = bytes(range(256)) * 40  # 10,240 bytes, each position's byte known


@pytest.fixture()
def fd(tmp_path: Path) -> Iterator[int]:
    """A descriptor open on a file holding ``DATA``."""
    path = tmp_path / "segment.log"
    path.write_bytes(DATA)
    descriptor = os.open(path, os.O_RDONLY)
    try:
        yield descriptor
    finally:
        os.close(descriptor)


def test_a_window_reads_its_bytes_of_the_file_and_seeks_within_them(fd: int) -> None:
    window = Window(fd, 1000, 300, None, None)
    assert len(window) == 300
    assert window.seekable() and window.readable()
    assert window.read(100) + window.read() == DATA[1000:1300]
    assert window.read() == b""  # at its end
    assert window.seek(-50, os.SEEK_END) == 250 and window.read() == DATA[1250:1300]
    assert window.seek(10) == 10 and window.seek(5, os.SEEK_CUR) == 15 and window.tell() == 15
    assert window.seek(-99) == 0 and window.seek(10_000) == 300  # held within the window
    window.seek(0)
    assert window.read(10_000) == DATA[1000:1300]  # never past its length


def test_progress_counts_each_byte_once_and_the_quota_each_time_it_is_sent(fd: int) -> None:
    """A retried part is read again from its start: the quota takes its bytes again, the progress
    does not report them twice."""
    progress: list[int] = []
    taken: list[int] = []
    window = Window(fd, 0, 1000, progress.append, None, taken.append)
    window.read(600)
    window.seek(0)  # the part is retried
    assert window.read() == DATA[:1000]
    assert sum(progress) == 1000
    assert sum(taken) == 1600


def test_an_abandoned_upload_ends_a_window_at_its_next_read(fd: int) -> None:
    stop = threading.Event()
    taken: list[int] = []

    def take(n: int) -> None:  # the upload is abandoned while the quota holds the read back
        taken.append(n)
        stop.set()

    window = Window(fd, 0, 100, None, stop, take)
    with pytest.raises(Abandoned):
        window.read(10)
    assert taken == [10] and window.tell() == 0  # nothing read after the stop
    with pytest.raises(Abandoned):
        window.read(10)


def test_a_file_shrunk_under_a_window_is_an_error_naming_where(fd: int) -> None:
    window = Window(fd, len(DATA) - 10, 20, None, None)
    with pytest.raises(RemoteStorageError, match=f"file shrank while uploading: wanted 20 bytes at {len(DATA) - 10}"):
        window.read()


@pytest.mark.parametrize("chunk", [1 << 20, 7, 1])
def test_a_window_crc_is_the_crc32c_of_its_bytes_whatever_the_chunk_read(
    fd: int, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(multipart, "CRC_CHUNK", chunk)
    path = Path("segment.log")
    assert window_crc(fd, 0, len(DATA), path) == crc32c(DATA)
    assert window_crc(fd, 333, 1000, path) == crc32c(DATA[333:1333])
    assert window_crc(fd, 5, 0, path) == crc32c(b"")


def test_a_window_crc_past_the_end_of_the_file_names_the_file_and_its_end(fd: int) -> None:
    with pytest.raises(RemoteStorageError, match=f"segment.log: file shrank while uploading: it ends at {len(DATA)}"):
        window_crc(fd, len(DATA) - 10, 20, Path("segment.log"))


def test_b64_spells_a_crc32c_as_s3s_header_does() -> None:
    """The CRC-32C check value of "123456789" is 0xE3069283: four big-endian bytes, base64."""
    assert b64(crc32c(b"123456789")) == base64.b64encode(bytes([0xE3, 0x06, 0x92, 0x83])).decode()
    assert b64(0) == "AAAAAA=="
    assert b64(-1) == b64(0xFFFFFFFF) == "/////w=="  # kept to 32 bits


def test_the_multipart_etag_is_the_md5_of_the_parts_md5s_and_their_count() -> None:
    bodies = [b"first part", b"second part", b"third"]
    parts = [{"PartNumber": n, "ETag": f'"{hashlib.md5(b).hexdigest()}"'} for n, b in enumerate(bodies, 1)]
    joined = b"".join(hashlib.md5(b).digest() for b in bodies)
    assert multipart_etag(parts) == f'"{hashlib.md5(joined).hexdigest()}-3"'


def test_a_part_etag_that_is_not_an_md5_gives_no_etag() -> None:
    assert multipart_etag([{"ETag": '"not-hex"'}]) is None


def test_locked_progress_reports_every_count_and_none_stays_none() -> None:
    assert locked(None) is None
    seen: list[int] = []
    report = locked(seen.append)
    assert report is not None
    threads = [threading.Thread(target=lambda: [report(1) for _ in range(1000)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(seen) == 4000


def test_parts_sent_in_parallel_complete_in_part_order() -> None:
    """The first part ends last (it waits for the others): the results still come in part order."""
    others_done = threading.Event()
    ended: list[int] = []
    completed: list[list[tuple[int, str]]] = []
    aborted: list[bool] = []

    def send(number: int, offset: int, length: int, stop: threading.Event) -> tuple[int, str]:
        if number == 1:
            assert others_done.wait(10)
        ended.append(number)
        if number == 3:
            others_done.set()
        return crc32c(DATA[offset : offset + length]), f"etag-{number}"

    windows = [(1, 0, 100), (2, 100, 100), (3, 200, 50)]
    results = send_parts(windows, send, completed.append, lambda: aborted.append(True), concurrency=3)
    expected = [(crc32c(DATA[o : o + n]), f"etag-{p}") for p, o, n in windows]
    assert results == expected
    assert completed == [expected]
    assert not aborted
    assert ended[-1] == 1


def test_a_failed_part_stops_the_others_aborts_and_raises_its_own_error(fd: int) -> None:
    """Part 1 is in flight when part 2 fails: it ends at its next read, part 3 never starts, the
    upload is aborted and not completed, and part 2's error is what the caller sees."""
    started = threading.Event()
    sent: list[int] = []
    completed: list[object] = []
    aborts: list[bool] = []

    def send(number: int, offset: int, length: int, stop: threading.Event) -> tuple[int, str]:
        sent.append(number)
        window = Window(fd, offset, length, None, stop)
        if number == 1:
            window.read(10)
            started.set()
            assert stop.wait(10)
            window.read(10)  # raises Abandoned
        assert started.wait(10)
        raise RemoteStorageError(f"part {number} refused")

    with pytest.raises(RemoteStorageError, match="part 2 refused"):
        send_parts(
            [(1, 0, 100), (2, 100, 100), (3, 200, 100)],
            send,
            completed.append,
            lambda: aborts.append(True),
            concurrency=2,
        )
    assert sorted(sent) == [1, 2]
    assert not completed
    assert aborts
