"""Examining a segment's indexes where its files are: storage or the broker's log dir, never metadata.

``examine_remote_segment`` and ``check_local_segment`` touch only storage or files and run
anywhere (e.g. a Spark executor). Indexes are judged only against a ``.log`` proven intact: its
size and CRC-32C equal what copy recorded, and every batch passes its own CRC.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tiering_core.engine.segment_ops import segment_facts, segment_ref, stored_epoch_index
from tiering_core.errors import CorruptLogError
from tiering_core.kafka.batch import verify_log_crc
from tiering_core.kafka.crc import crc32c
from tiering_core.kafka.files import INDEX_READ_LIMIT, read_regular
from tiering_core.kafka.index_rebuild import RebuiltIndexes, rebuild_indexes
from tiering_core.kafka.producer_snapshot import open_transactions, parse_producer_snapshot
from tiering_core.metadata.store import RemoteLogSegmentMetadata
from tiering_core.storage.checksum import crc_hex
from tiering_core.storage.chunks import ChunkError
from tiering_core.storage.errors import ManifestError, RemoteStorageError
from tiering_core.storage.layout import ObjectKind, RemoteSegmentRef
from tiering_core.storage.manifest import CopyRecord

if TYPE_CHECKING:
    from tiering_core.kafka.partition_log import LogSegment, PartitionLog
    from tiering_core.storage.manifest import SegmentManifest
    from tiering_core.storage.remote import RemoteStorage
from tiering_core.events.rebuild import IndexCheck, IndexFinding, IndexStatus
from tiering_core.runs.errors import DamagedSegmentError
from tiering_core.runs.rebuild.findings import CARRIED_KINDS, INDEX_KINDS, judge_index

log = logging.getLogger(__name__)


# --- remote segments (storage only: runs anywhere) -------------------------------------------

#: Download chunk of a remote ``.log`` (its size and CRC-32C are computed as it passes).
DOWNLOAD_CHUNK = 1 << 20


@dataclass(frozen=True)
class RemoteIndexTask:
    """What an examination needs; plain data, so it pickles to Spark executors.

    ``previous`` is the finished segment ending just below this one (its producer snapshot is
    the producer state at this segment's base); ``open_transactions``, when known from an
    earlier examination, is used instead (a repair may have replaced ``previous`` since).
    With ``repair_ref`` set, a segment whose indexes need repair is copied again under that
    ref (its STARTED metadata exists).
    """

    segment: RemoteLogSegmentMetadata
    previous: RemoteLogSegmentMetadata | None
    index_interval_bytes: int
    repair_ref: RemoteSegmentRef | None = None
    open_transactions: dict[int, int] | None = None


@dataclass(frozen=True)
class RemoteIndexExamination:
    check: IndexCheck
    manifest: SegmentManifest | None = None  # the repaired copy's manifest
    open_transactions: dict[int, int] | None = None  # producer state used at the segment's base


def _rebuilt_bytes(rebuilt: RebuiltIndexes, kind: ObjectKind) -> bytes:
    if kind == ObjectKind.OFFSET_INDEX:
        return rebuilt.offset_index
    if kind == ObjectKind.TIME_INDEX:
        return rebuilt.time_index
    return rebuilt.txn_index


def _open_transactions(snapshot: bytes | None, where: Path | str) -> dict[int, int]:
    """The open transactions recorded in a producer snapshot (none without one)."""
    if snapshot is None:
        return {}
    return open_transactions(parse_producer_snapshot(snapshot, Path(where)))


def _stored(storage: RemoteStorage, ref: RemoteSegmentRef, kind: ObjectKind) -> bytes | None:
    if storage.object_size(ref.key(kind, storage.prefix)) is None:
        return None
    return storage.fetch(ref, kind)


def _damaged(segment: RemoteLogSegmentMetadata, kind: ObjectKind, exc: ChunkError) -> DamagedSegmentError:
    """A chunk that fails its checks: the object is not what was copied (nothing is repaired from it)."""
    return DamagedSegmentError(
        f"damaged {kind.value}: segment {segment.segment_id} [{segment.start_offset}..{segment.end_offset}]: {exc} "
        "(not the bytes whose CRC-32C and SHA-256 were recorded at copy time)"
    )


def _stored_index(
    storage: RemoteStorage, segment: RemoteLogSegmentMetadata, kind: ObjectKind
) -> tuple[bytes | None, str | None]:
    """A stored index, or why it cannot be used: a damaged chunk makes it one to rebuild (the
    ``.log`` it is rebuilt from was proven intact first)."""
    try:
        return _stored(storage, segment_ref(segment), kind), None
    except ChunkError as exc:
        return None, str(exc)


def _stored_checked(storage: RemoteStorage, segment: RemoteLogSegmentMetadata, kind: ObjectKind) -> bytes | None:
    """An object a repair or a rebuild relies on, a damaged chunk a ``DamagedSegmentError``."""
    try:
        return _stored(storage, segment_ref(segment), kind)
    except ChunkError as exc:
        raise _damaged(segment, kind, exc) from exc


def recorded_object(segment: RemoteLogSegmentMetadata, kind: ObjectKind) -> tuple[int | None, str | None]:
    """Size and CRC-32C (hex) of one object as the metadata recorded them when the copy finished."""
    record = CopyRecord.of_segment(segment)
    return record.size(kind), record.crc(kind)


class RecordedObjects:
    """What was recorded of a segment's objects at copy time: the metadata, else its manifest
    (read once, only for a segment whose metadata lacks the checksums)."""

    def __init__(self, storage: RemoteStorage, segment: RemoteLogSegmentMetadata) -> None:
        self.storage = storage
        self.segment = segment
        self._manifest: SegmentManifest | None = None
        self._manifest_read = False

    def expected(self, kind: ObjectKind) -> tuple[int | None, str | None]:
        size, crc = recorded_object(self.segment, kind)
        if size is not None and crc is not None:
            return size, crc
        if not self._manifest_read:
            self._manifest_read = True
            try:
                self._manifest = self.storage.read_manifest(segment_ref(self.segment))
            except ManifestError:
                self._manifest = None
        entry = self._manifest.objects.get(kind) if self._manifest is not None else None
        if entry is not None:
            size = entry.size if size is None else size
            crc = entry.crc32c if crc is None else crc
        return size, crc

    def check(self, kind: ObjectKind, size: int, crc: int, note: str = "") -> None:
        """Raise DamagedSegmentError naming the segment unless the object is what was copied."""
        segment = self.segment
        want_size, want_crc = self.expected(kind)
        problems = []
        if want_crc is None:
            problems.append("no CRC-32C was recorded for it, so it cannot be trusted")
        sizes = {s for s in (want_size, segment.size_bytes if kind == ObjectKind.LOG else None) if s is not None}
        if sizes and sizes != {size}:
            problems.append(f"it is {size} bytes, {'/'.join(map(str, sorted(sizes)))} recorded at copy time")
        if want_crc is not None and crc_hex(crc) != want_crc:
            problems.append(f"its CRC-32C is {crc_hex(crc)}, {want_crc} recorded at copy time")
        if problems:
            raise DamagedSegmentError(
                f"damaged {kind.value}: segment {segment.segment_id} [{segment.start_offset}..{segment.end_offset}]: "
                f"{'; '.join(problems)}{note}"
            )

    def check_bytes(self, kind: ObjectKind, data: bytes, note: str = "") -> bytes:
        self.check(kind, len(data), crc32c(data), note)
        return data


def _download_log(storage: RemoteStorage, recorded: RecordedObjects, target: Path) -> int:
    """Download the segment's ``.log`` and prove it intact: size and CRC-32C as recorded at copy
    time, and every batch passing its own CRC. Returns its size."""
    segment = recorded.segment
    size = value = 0
    try:
        with storage.open_stream(segment_ref(segment), ObjectKind.LOG) as source, target.open("wb") as sink:
            while chunk := source.read(DOWNLOAD_CHUNK):
                value = crc32c(chunk, value)
                size += len(chunk)
                sink.write(chunk)
    except ChunkError as exc:
        raise _damaged(segment, ObjectKind.LOG, exc) from exc
    recorded.check(ObjectKind.LOG, size, value)
    try:
        verify_log_crc(target)
    except CorruptLogError as exc:
        raise DamagedSegmentError(
            f"damaged log: segment {segment.segment_id} [{segment.start_offset}..{segment.end_offset}]: "
            f"at byte {exc.position}: {exc.reason}"
        ) from exc
    return size


def _producer_state_at_base(storage: RemoteStorage, task: RemoteIndexTask) -> dict[int, int]:
    """Open transactions at the segment's base, from the previous segment's producer snapshot
    (checked against its recorded checksum: the transaction index is rebuilt from it)."""
    previous = task.previous
    if previous is None:
        return {}
    ref = segment_ref(previous)
    snapshot = _stored_checked(storage, previous, ObjectKind.PRODUCER_SNAPSHOT)
    if snapshot is None:
        log.warning(
            "%s: producer snapshot of %s is missing; assuming no open transactions", segment_ref(task.segment), ref
        )
        return {}
    RecordedObjects(storage, previous).check_bytes(
        ObjectKind.PRODUCER_SNAPSHOT,
        snapshot,
        f" (the transaction index of segment {task.segment.segment_id} is rebuilt from it)",
    )
    return _open_transactions(snapshot, f"snapshot of {ref}")


def _carried_objects(storage: RemoteStorage, recorded: RecordedObjects) -> dict[ObjectKind, bytes]:
    """The objects a repaired copy takes over unchanged, each proven to be what was copied."""
    ref = segment_ref(recorded.segment)
    carried = {}
    for kind in CARRIED_KINDS:
        data = _stored_checked(storage, recorded.segment, kind)
        if data is None:
            raise RemoteStorageError(f"{ref}: its {kind.value} object is missing too; not repairable from the log")
        carried[kind] = recorded.check_bytes(kind, data)
    return carried


def examine_remote_segment(
    storage: RemoteStorage, task: RemoteIndexTask, *, workdir: Path | None = None
) -> RemoteIndexExamination:
    """Download the ``.log``, prove it intact, rebuild its indexes, compare; with ``repair_ref``,
    copy it again.

    Writes no metadata. Storage failures and a damaged ``.log`` (or a damaged object a repair
    would carry over) are reported in the check's ``error``: nothing is repaired from them.
    """
    segment = task.segment
    tp = segment.topic_id_partition.topic_partition
    started = time.monotonic()
    check = IndexCheck(
        tp.topic, tp.partition, segment.start_offset, segment.end_offset, "remote", str(segment.segment_id)
    )
    tmp = Path(tempfile.mkdtemp(prefix="tiering-rebuild-", dir=workdir))
    try:
        log_path = tmp / f"{segment.start_offset:020d}.log"
        recorded = RecordedObjects(storage, segment)
        carried: dict[ObjectKind, bytes] = {}
        try:
            log_bytes = _download_log(storage, recorded, log_path)
            ongoing = task.open_transactions
            if ongoing is None:
                ongoing = _producer_state_at_base(storage, task)
            rebuilt = rebuild_indexes(
                log_path,
                segment.start_offset,
                index_interval_bytes=task.index_interval_bytes,
                is_active=False,
                open_txn_first_offsets=ongoing,
            )
            read = {kind: _stored_index(storage, segment, kind) for kind in INDEX_KINDS}
            stored = {kind: data for kind, (data, _) in read.items()}
            findings = tuple(
                judge_index(kind, stored[kind], _rebuilt_bytes(rebuilt, kind), log_path, segment.start_offset)
                if read[kind][1] is None
                else IndexFinding(kind, IndexStatus.DIFFERED, None, len(_rebuilt_bytes(rebuilt, kind)), read[kind][1])
                for kind in INDEX_KINDS
            )
            if any(f.status != IndexStatus.OK for f in findings):
                carried = _carried_objects(storage, recorded)
        except DamagedSegmentError as exc:
            damaged = replace(check, error=str(exc), damaged_log=True, seconds=time.monotonic() - started)
            return RemoteIndexExamination(damaged)
        except (RemoteStorageError, CorruptLogError) as exc:
            return RemoteIndexExamination(replace(check, error=str(exc), seconds=time.monotonic() - started))
        check = replace(check, findings=findings, log_bytes=log_bytes)
        manifest = None
        if task.repair_ref is not None and check.needs_repair:
            try:
                manifest = _copy_repaired(storage, task.repair_ref, segment, log_path, rebuilt, stored, carried)
            except (RemoteStorageError, CorruptLogError) as exc:
                check = replace(check, error=f"repair failed: {exc}")
        return RemoteIndexExamination(replace(check, seconds=time.monotonic() - started), manifest, dict(ongoing))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _copy_repaired(
    storage: RemoteStorage,
    target: RemoteSegmentRef,
    segment: RemoteLogSegmentMetadata,
    log_path: Path,
    rebuilt: RebuiltIndexes,
    stored: dict[ObjectKind, bytes | None],
    carried: dict[ObjectKind, bytes],
) -> SegmentManifest:
    """The segment's objects under the new attempt: the proven log, rebuilt indexes, the proven
    snapshot and leader-epoch index; its manifest with the segment's metadata, and as its epoch
    index the leader-epoch index it carries over."""
    files: dict[ObjectKind, Path | bytes] = {
        ObjectKind.LOG: log_path,
        ObjectKind.OFFSET_INDEX: rebuilt.offset_index,
        ObjectKind.TIME_INDEX: rebuilt.time_index,
    }
    if rebuilt.txn_index or stored.get(ObjectKind.TRANSACTION_INDEX) is not None:
        files[ObjectKind.TRANSACTION_INDEX] = rebuilt.txn_index
    files.update(carried)
    checkpoint = carried.get(ObjectKind.LEADER_EPOCH_CHECKPOINT)
    key = segment_ref(segment).key(ObjectKind.LEADER_EPOCH_CHECKPOINT, storage.prefix)
    epoch_index = () if checkpoint is None else stored_epoch_index(checkpoint, key)
    return storage.copy_segment(target, files, facts=segment_facts(segment, epoch_index))


# --- local segments (the broker's files; read-only) ------------------------------------------


@dataclass(frozen=True)
class LocalIndexTask:
    partition_dir: Path
    base_offset: int
    next_base_offset: int | None  # None: the active segment
    index_interval_bytes: int


def local_index_tasks(partition_log: PartitionLog, index_interval_bytes: int) -> list[LocalIndexTask]:
    segments = partition_log.segments
    return [
        LocalIndexTask(
            partition_log.path,
            s.base_offset,
            segments[i + 1].base_offset if i + 1 < len(segments) else None,
            index_interval_bytes,
        )
        for i, s in enumerate(segments)
    ]


def _read(path: Path | None) -> bytes | None:
    if path is None or not path.exists():
        return None
    return read_regular(path, INDEX_READ_LIMIT, "index")


def check_local_segment(task: LocalIndexTask) -> IndexCheck:
    """Rebuild a broker segment's indexes and compare with its files (never writes to the log dir).

    The active segment's index files are pre-allocated, so entries (up to the zero tail) are
    compared instead of bytes; its time index has no roll entry yet.
    """
    from tiering_core.kafka.partition_log import PartitionLog

    started = time.monotonic()
    partition_log = PartitionLog(task.partition_dir)
    tp = partition_log.topic_partition
    active = task.next_base_offset is None
    end = None if active else task.next_base_offset - 1  # type: ignore[operator]
    check = IndexCheck(tp.topic, tp.partition, task.base_offset, end, "local", None)
    segment = next((s for s in partition_log.segments if s.base_offset == task.base_offset), None)
    if segment is None:
        return replace(check, error="segment is no longer in the log dir")
    try:
        snapshot_path = partition_log.producer_snapshot_path(task.base_offset)
        ongoing = _open_transactions(_read(snapshot_path), snapshot_path or "<none>")
        rebuilt = rebuild_indexes(
            segment.log_path,
            task.base_offset,
            index_interval_bytes=task.index_interval_bytes,
            is_active=active,
            open_txn_first_offsets=ongoing,
        )
        findings = tuple(_compare_local(kind, segment, rebuilt, active, task.base_offset) for kind in INDEX_KINDS)
    except (CorruptLogError, OSError) as exc:
        return replace(check, error=str(exc), seconds=time.monotonic() - started)
    return replace(check, findings=findings, log_bytes=segment.size_bytes, seconds=time.monotonic() - started)


def _compare_local(
    kind: ObjectKind, segment: LogSegment, rebuilt: RebuiltIndexes, active: bool, base: int
) -> IndexFinding:
    path = {
        ObjectKind.OFFSET_INDEX: segment.index_path,
        ObjectKind.TIME_INDEX: segment.time_index_path,
        ObjectKind.TRANSACTION_INDEX: segment.txn_index_path,
    }[kind]
    stored = _read(path)
    return judge_index(
        kind, stored, _rebuilt_bytes(rebuilt, kind), segment.log_path, base, is_active=active, path=path or Path()
    )
