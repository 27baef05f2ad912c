"""Filesystem backend specifics: atomic writes, modes, empty directories, keys kept under the root."""

from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path

import pytest

from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.storage.checksum import crc32c, crc_hex
from tiering_core.storage.errors import RemoteStorageError
from tiering_core.storage.filesystem import FilesystemRemoteStorage, _KernelCopy
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
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(stored.stat().st_mode) == 0o666 & ~umask  # readable by other readers, as a copy is
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


@pytest.mark.parametrize("modes", [("copy_file_range",), ("sendfile",), ("pwrite",), _KernelCopy.MODES])
def test_every_kernel_copy_mode_copies_exactly(tmp_path: Path, modes: tuple[str, ...]) -> None:
    data = os.urandom((3 << 20) + 7)
    (tmp_path / "src").write_bytes(data)
    with open(tmp_path / "src", "rb") as src, open(tmp_path / "dst", "wb+") as dst:
        copier = _KernelCopy(src.fileno(), dst.fileno(), modes)
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
