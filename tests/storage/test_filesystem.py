"""Filesystem backend specifics: atomic writes, modes, empty directories, keys kept under the root."""

from __future__ import annotations

import _thread
import errno
import os
import re
import stat
import uuid
from pathlib import Path

import pytest

from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.storage.checksum import crc32c, crc_hex
from tiering_core.storage.errors import RemoteStorageError
from tiering_core.storage.filesystem import FilesystemRemoteStorage, KernelCopy
from tiering_core.storage.layout import ObjectKind, RemoteSegmentRef

TIP = TopicIdPartition("GGGGGGGGGGGGGGGGGGGGGG", TopicPartition("fs", 3))


def test_objects_are_whole_files_with_the_usual_mode(tmp_path: Path) -> None:
    storage = FilesystemRemoteStorage(tmp_path / "tier")
    source = tmp_path / "seg.log"
    source.write_bytes(os.urandom(3 << 20))
    ref = RemoteSegmentRef(TIP, 42, uuid.uuid4())
    storage.copy_segment(ref, {ObjectKind.LOG: source})
    stored = tmp_path / "tier" / ref.key(ObjectKind.LOG)
    assert stored.read_bytes() == source.read_bytes()
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600  # the platform's user only, whatever the umask
    for directory in (stored.parent, *[p for p in stored.parents if tmp_path / "tier" in p.parents]):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "tier").stat().st_mode) == 0o700
    assert [p.name for p in stored.parent.iterdir() if p.name.startswith(".tmp-")] == []


def test_a_failed_write_leaves_neither_object_nor_temp_file(tmp_path: Path) -> None:
    storage = FilesystemRemoteStorage(tmp_path / "tier")
    ref = RemoteSegmentRef(TIP, 0, uuid.uuid4())
    key = ref.key(ObjectKind.LOG)
    (tmp_path / "tier" / key).mkdir(parents=True)  # the rename onto the key fails
    with pytest.raises(RemoteStorageError, match="put failed"):
        storage.put_object(key, b"data")
    assert [p.name for p in (tmp_path / "tier" / key).parent.iterdir()] == [Path(key).name]


def test_deleting_the_last_object_removes_empty_directories(tmp_path: Path) -> None:
    root = tmp_path / "tier"
    storage = FilesystemRemoteStorage(root, prefix="pre/")
    refs = [RemoteSegmentRef(TIP, base, uuid.uuid4()) for base in (0, 100)]
    for ref in refs:
        storage.copy_segment(ref, {ObjectKind.LOG: b"x", ObjectKind.OFFSET_INDEX: b"i"})
    storage.delete_segment(refs[0])
    assert (root / "pre" / f"fs-{TIP.topic_id}" / "3").is_dir()  # still holds the other segment
    storage.delete_segment(refs[1])
    assert list(root.iterdir()) == []  # as in S3, no directories without objects
    storage.copy_segment(refs[0], {ObjectKind.LOG: b"again"})  # and the next put recreates them
    assert storage.fetch(refs[0], ObjectKind.LOG) == b"again"


@pytest.mark.parametrize("key", ["../outside", "a/../../outside", "/etc/passwd", ""])
def test_keys_that_leave_the_root_are_refused(tmp_path: Path, key: str) -> None:
    storage = FilesystemRemoteStorage(tmp_path / "tier")
    with pytest.raises(RemoteStorageError, match="leaves the root"):
        storage.put_object(key, b"x")
    with pytest.raises(RemoteStorageError, match="leaves the root"):
        storage.delete_keys([key])
    assert not (tmp_path / "outside").exists()


def test_listing_skips_temp_files_and_sees_mtimes(tmp_path: Path) -> None:
    storage = FilesystemRemoteStorage(tmp_path / "tier")
    ref = RemoteSegmentRef(TIP, 0, uuid.uuid4())
    storage.copy_segment(ref, {ObjectKind.LOG: b"x"})
    leftover = (tmp_path / "tier" / ref.key(ObjectKind.LOG)).with_name(".tmp-crashed.log.1234")
    leftover.write_bytes(b"half")
    os.utime(tmp_path / "tier" / ref.key(ObjectKind.LOG), (1_600_000_000, 1_600_000_000))
    listed = {o.key: o for o in storage.list_objects(TIP)}
    assert sorted(listed) == sorted([ref.key(ObjectKind.LOG), ref.key(ObjectKind.MANIFEST)])
    assert listed[ref.key(ObjectKind.LOG)].last_modified.timestamp() == 1_600_000_000


@pytest.mark.parametrize("modes", [("copy_file_range",), ("sendfile",), ("pwrite",), KernelCopy.MODES])
def test_every_kernel_copy_mode_copies_exactly(tmp_path: Path, modes: tuple[str, ...]) -> None:
    data = os.urandom((3 << 20) + 7)
    (tmp_path / "src").write_bytes(data)
    with open(tmp_path / "src", "rb") as src, open(tmp_path / "dst", "wb+") as dst:
        copier = KernelCopy(src.fileno(), dst.fileno(), modes)
        copier.copy(1 << 20, len(data) - (1 << 20))  # the tail first, then the head: offsets are explicit
        copier.copy(0, 1 << 20)
        with pytest.raises(OSError, match="source ended at byte"):
            copier.copy(len(data) - 3, 10)  # a source shorter than it was is an error, never a short object
    assert (tmp_path / "dst").read_bytes()[: len(data)] == data


def test_source_on_another_filesystem(tmp_path: Path) -> None:
    """/dev/shm is tmpfs: copy_file_range refuses to cross filesystems there, sendfile takes over."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else tmp_path
    source = base / f"tiering-test-{uuid.uuid4().hex}.log"
    data = os.urandom((20 << 20) + 3)  # more than one 16 MiB chunk
    source.write_bytes(data)
    try:
        storage = FilesystemRemoteStorage(tmp_path / "tier")
        ref = RemoteSegmentRef(TIP, 0, uuid.uuid4())
        manifest = storage.copy_segment(ref, {ObjectKind.LOG: source})
        assert (tmp_path / "tier" / ref.key(ObjectKind.LOG)).read_bytes() == data
        assert manifest.objects[ObjectKind.LOG].crc32c == crc_hex(crc32c(data))
        assert storage.verify_segment(ref) == []
    finally:
        source.unlink()


def test_an_interrupt_mid_copy_leaves_no_temp_file_and_no_object(tmp_path: Path, ctrl_c: None) -> None:
    """Ctrl-C while a large object is being copied (between two of its chunks): the temp file
    is removed and no object of the segment (manifest included) is left."""
    storage = FilesystemRemoteStorage(tmp_path / "tier")
    source = tmp_path / "seg.log"
    source.write_bytes(os.urandom(40 << 20))  # three copy chunks
    ref = RemoteSegmentRef(TIP, 0, uuid.uuid4())
    copied: list[int] = []

    def interrupt_after_first_chunk(n: int) -> None:
        copied.append(n)
        if len(copied) == 1:
            _thread.interrupt_main()

    with pytest.raises(KeyboardInterrupt):
        storage.copy_segment(ref, {ObjectKind.LOG: source}, progress=interrupt_after_first_chunk)
    assert len(copied) < 3  # stopped mid-copy, not after it
    left = [p for p in (tmp_path / "tier").rglob("*") if p.is_file()]
    assert left == [] and storage.list_objects(TIP) == [] and storage.read_manifest(ref) is None


def test_reads_larger_than_one_pread_come_back_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Linux returns at most 0x7ffff000 bytes from one pread, so a range over 2 GiB came back
    short. The cap is injected at 1 MiB here to show every byte is read, without 2 GiB of memory."""
    storage = FilesystemRemoteStorage(tmp_path / "tier")
    data = os.urandom((3 << 20) + 5)
    ref = RemoteSegmentRef(TIP, 0, uuid.uuid4())
    storage.copy_segment(ref, {ObjectKind.LOG: data})
    real_pread = os.pread
    calls: list[int] = []

    def capped(fd: int, n: int, offset: int) -> bytes:
        calls.append(n)
        return real_pread(fd, min(n, 1 << 20), offset)

    monkeypatch.setattr(os, "pread", capped)
    assert storage.fetch(ref, ObjectKind.LOG) == data
    assert storage.fetch(ref, ObjectKind.LOG, 7, (2 << 20) + 9) == data[7 : (2 << 20) + 10]
    assert len(calls) > 2


def test_read_errors_are_storage_errors_naming_the_object(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = FilesystemRemoteStorage(tmp_path / "tier")
    ref = RemoteSegmentRef(TIP, 0, uuid.uuid4())
    storage.copy_segment(ref, {ObjectKind.LOG: os.urandom(4 << 20)})
    key = ref.key(ObjectKind.LOG)

    def failing(*_args: object) -> bytes:
        raise OSError(errno.EIO, "Input/output error")

    storage.read_manifest(ref)  # read once per process, as every reader does: the log's reads fail
    with monkeypatch.context() as patch:
        patch.setattr(os, "pread", failing)
        with pytest.raises(RemoteStorageError, match=rf"{re.escape(key)}: read failed: .*Input/output error"):
            storage.fetch(ref, ObjectKind.LOG)
    with storage.open_object(key) as stream:
        assert len(stream.read(10)) == 10
        monkeypatch.setattr(os, "preadv", failing)
        with pytest.raises(RemoteStorageError, match=rf"{re.escape(key)}: read failed: .*Input/output error"):
            stream.read(8 << 20)


def test_a_stream_over_an_object_truncated_meanwhile_is_an_error_not_a_short_read(tmp_path: Path) -> None:
    storage = FilesystemRemoteStorage(tmp_path / "tier")
    ref = RemoteSegmentRef(TIP, 0, uuid.uuid4())
    storage.copy_segment(ref, {ObjectKind.LOG: os.urandom(3 << 20)})
    with storage.open_object(ref.key(ObjectKind.LOG)) as stream, storage.open_stream(ref, ObjectKind.LOG) as chunks:
        os.truncate(tmp_path / "tier" / ref.key(ObjectKind.LOG), 1 << 20)
        with pytest.raises(RemoteStorageError, match="object ended at byte"):
            stream.read()
        with pytest.raises(RemoteStorageError, match="log chunk 0: the stored object is cut short"):
            chunks.read()


def test_deletes_are_made_durable_in_the_directories_they_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After unlinking, each changed directory is fsynced (the partition directory, or, when
    the delete emptied and removed it, the directory that held it)."""
    from tiering_core.storage import filesystem

    root = tmp_path / "tier"
    storage = FilesystemRemoteStorage(root)
    refs = [RemoteSegmentRef(TIP, base, uuid.uuid4()) for base in (0, 100)]
    for ref in refs:
        storage.copy_segment(ref, {ObjectKind.LOG: b"x"})
    synced: list[Path] = []
    real = filesystem._fsync_dir

    def recording(directory: Path) -> None:
        synced.append(Path(directory))
        real(directory)

    monkeypatch.setattr(filesystem, "_fsync_dir", recording)
    partition_dir = root / f"fs-{TIP.topic_id}" / "3"
    storage.delete_segment(refs[0])
    assert synced and set(synced) == {partition_dir}
    synced.clear()
    storage.delete_segment(refs[1])  # empties the partition and topic directories: both go
    assert not (root / f"fs-{TIP.topic_id}").exists()
    assert set(synced) == {partition_dir, root}


def test_large_objects_are_checksummed_chunk_by_chunk_while_copied(tmp_path: Path) -> None:
    storage = FilesystemRemoteStorage(tmp_path / "tier")
    data = os.urandom((50 << 20) + 5)  # four 16 MiB chunks, the last one short
    (tmp_path / "seg.log").write_bytes(data)
    seen: list[int] = []
    ref = RemoteSegmentRef(TIP, 0, uuid.uuid4())
    manifest = storage.copy_segment(ref, {ObjectKind.LOG: tmp_path / "seg.log"}, progress=seen.append)
    assert manifest.objects[ObjectKind.LOG].crc32c == crc_hex(crc32c(data))
    assert sum(seen) == len(data) and len(seen) == 4
    assert (tmp_path / "tier" / ref.key(ObjectKind.LOG)).read_bytes() == data


def test_a_segment_copy_syncs_each_file_once_and_its_directory_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every object and the manifest are fsynced before their rename; the partition directory
    once, after the manifest's rename, when copy_segment is about to return."""
    from tiering_core.storage import filesystem

    storage = FilesystemRemoteStorage(tmp_path / "tier")
    storage.copy_segment(RemoteSegmentRef(TIP, 0, uuid.uuid4()), {ObjectKind.LOG: b"first"})  # directories exist
    files: list[int] = []
    directories: list[Path] = []
    real_fsync, real_dir = os.fsync, filesystem._fsync_dir

    def file_sync(fd: int) -> None:
        files.append(fd)
        real_fsync(fd)

    def dir_sync(directory: Path) -> None:
        directories.append(Path(directory))
        real_dir(directory)

    monkeypatch.setattr(os, "fsync", file_sync)
    monkeypatch.setattr(filesystem, "_fsync_dir", dir_sync)
    ref = RemoteSegmentRef(TIP, 100, uuid.uuid4())
    segment = {ObjectKind.LOG: b"log", ObjectKind.OFFSET_INDEX: b"i", ObjectKind.TIME_INDEX: b"t"}
    storage.copy_segment(ref, segment)
    assert len(files) - len(directories) == len(segment) + 1  # os.fsync of each file, the manifest too
    assert directories == [(tmp_path / "tier" / ref.key(ObjectKind.LOG)).parent]
    assert storage.verify_segment(ref) == []
