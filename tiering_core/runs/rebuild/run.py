"""Index rebuild: rebuild a segment's offset, time and transaction indexes from its ``.log``,
compare them with what is stored, and repair what is missing or different.

Indexes can always be rebuilt by walking batch headers (KAFKA_SEMANTICS section 1); the
transaction index also needs the transactions open at the segment's base, which the producer
snapshot at that offset holds (for a remote segment: the snapshot uploaded with the segment
that ends just below it).

A repair never rewrites a finished segment in place: KIP-405 segments are immutable and
readers cache index files by segment id. It copies the segment again as a new attempt (fresh
UUID, COPY_SEGMENT_STARTED, objects with the rebuilt indexes, manifest last,
COPY_SEGMENT_FINISHED with the new checksums), which supersedes the damaged one for its
range, then deletes the damaged attempt the usual way. The broker's own files (``local``)
are only checked: the log dirs are read-only for this platform.

Indexes are only ever judged against a ``.log`` that is proven intact: its size and CRC-32C
must equal what the copy recorded, and every batch must pass its own CRC. A bit flip in a
batch header would otherwise make correct indexes look damaged, and a repair would replace the
good copy with the damaged log. Such a segment is reported as a damaged log and nothing of it
is repaired; so are the producer snapshot and leader-epoch index a repair carries over, and
the previous segment's snapshot the transaction index is rebuilt from.

The work is split like the copy engine's: ``examine_remote_segment`` and
``check_local_segment`` touch only storage or files and run anywhere (e.g. a Spark
executor); ``start_index_repair``/``finish_index_repair``/``abandon_index_repair`` write
metadata under the partition's lease on the driver.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tiering_core.cli.output import fmt_bytes
from tiering_core.errors import CorruptLogError, TieringError
from tiering_core.kafka.batch import verify_log_crc
from tiering_core.kafka.crc import crc32c
from tiering_core.kafka.index import (
    IndexVerdict,
    RebuiltIndexes,
    check_broker_index,
    rebuild_indexes,
)
from tiering_core.kafka.snapshot import open_transactions, parse_producer_snapshot
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.metadata.errors import FencedError, LeaseHeldError
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.metadata.store import RemoteLogSegmentMetadata
from tiering_core.runs.copy import recover_failed_copies
from tiering_core.runs.lease import HeldPartition, held_partition
from tiering_core.runs.segment_ops import abandon_attempt, delete_remote_segment, segment_ref
from tiering_core.storage.checksum import crc_hex
from tiering_core.storage.errors import ManifestError, RemoteStorageError
from tiering_core.storage.layout import ObjectKind, RemoteSegmentRef
from tiering_core.storage.manifest import CopyRecord

if TYPE_CHECKING:
    from tiering_core.context import TieringContext
    from tiering_core.kafka.partition_log import LogSegment, PartitionLog
    from tiering_core.metadata.store import Lease, RemoteLogMetadataStore
    from tiering_core.storage.manifest import SegmentManifest
    from tiering_core.storage.segments import RemoteStorage

log = logging.getLogger(__name__)

Progress = Callable[[str], None]

INDEX_KINDS = (ObjectKind.OFFSET_INDEX, ObjectKind.TIME_INDEX, ObjectKind.TRANSACTION_INDEX)
#: Objects a repaired copy takes over unchanged from the damaged one.
CARRIED_KINDS = (ObjectKind.PRODUCER_SNAPSHOT, ObjectKind.LEADER_EPOCH_CHECKPOINT)


class DamagedSegmentError(TieringError):
    """A remote object does not match what was recorded when the segment was copied (or a batch
    of its ``.log`` fails its CRC): the segment's indexes cannot be judged, nothing is repaired."""


class IndexStatus(StrEnum):
    OK = "ok"
    MISSING = "missing"
    DIFFERED = "differed"
    REPAIRED = "repaired"
    ERROR = "error"


@dataclass(frozen=True)
class IndexFinding:
    """One index of one segment: what is stored against what the ``.log`` rebuilds to."""

    kind: ObjectKind
    status: IndexStatus  # ok, missing or differed
    stored_bytes: int | None
    rebuilt_bytes: int
    detail: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "status": self.status.value,
            "stored_bytes": self.stored_bytes,
            "rebuilt_bytes": self.rebuilt_bytes,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class IndexCheck:
    """The verdict on one segment's indexes (remote or local)."""

    topic: str
    partition: int
    base_offset: int
    end_offset: int | None
    location: str  # "remote" or "local"
    segment_id: str | None
    findings: tuple[IndexFinding, ...] = ()
    log_bytes: int = 0
    seconds: float = 0.0
    error: str | None = None
    repaired_as: str | None = None
    damaged_log: bool = False  # the error is a remote object that does not match its recorded checksum

    @property
    def needs_repair(self) -> bool:
        return self.error is None and any(f.status != IndexStatus.OK for f in self.findings)

    @property
    def status(self) -> IndexStatus:
        if self.error is not None:
            return IndexStatus.ERROR
        if self.repaired_as is not None:
            return IndexStatus.REPAIRED
        found = {f.status for f in self.findings}
        if IndexStatus.MISSING in found:
            return IndexStatus.MISSING
        if IndexStatus.DIFFERED in found:
            return IndexStatus.DIFFERED
        return IndexStatus.OK

    def describe(self) -> str:
        """One progress line: the segment, its verdict and what each index showed."""
        end = "..active" if self.end_offset is None else f"..{self.end_offset}"
        head = f"{self.topic}-{self.partition}: {self.location} segment {self.base_offset} [{self.base_offset}{end}]"
        if self.error is not None:
            return f"{head}: error: {self.error}"
        parts = []
        for f in self.findings:
            parts.append(f"{f.kind.value} {f.status.value}" + (f" ({f.detail})" if f.detail else ""))
        line = f"{head}: {self.status.value}: {', '.join(parts)}"
        if self.repaired_as is not None:
            line += f"; copied again as {self.repaired_as}"
        return f"{line} [{fmt_bytes(self.log_bytes)} of log in {self.seconds:.2f} s]"

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "base_offset": self.base_offset,
            "end_offset": self.end_offset,
            "location": self.location,
            "segment_id": self.segment_id,
            "status": self.status.value,
            "indexes": [f.to_dict() for f in self.findings],
            "log_bytes": self.log_bytes,
            "seconds": round(self.seconds, 3),
            "error": self.error,
            "damaged_log": self.damaged_log,
            "repaired_as": self.repaired_as,
        }


def _first_difference(a: bytes, b: bytes) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def compare_index(kind: ObjectKind, stored: bytes | None, rebuilt: bytes) -> IndexFinding:
    """Byte comparison; an absent transaction index equals an empty one (Kafka creates it lazily)."""
    if stored is None:
        if kind == ObjectKind.TRANSACTION_INDEX and not rebuilt:
            return IndexFinding(kind, IndexStatus.OK, None, 0)
        return IndexFinding(kind, IndexStatus.MISSING, None, len(rebuilt), "not stored")
    if stored == rebuilt:
        return IndexFinding(kind, IndexStatus.OK, len(stored), len(rebuilt))
    at = _first_difference(stored, rebuilt)
    return IndexFinding(
        kind,
        IndexStatus.DIFFERED,
        len(stored),
        len(rebuilt),
        f"{len(stored)} bytes stored, {len(rebuilt)} rebuilt, first difference at byte {at}",
    )


def judge_index(
    kind: ObjectKind,
    stored: bytes | None,
    rebuilt: bytes,
    log_path: Path,
    base_offset: int,
    *,
    is_active: bool = False,
    path: Path = Path("<memory>"),
) -> IndexFinding:
    """An offset or time index is fine when it is the rebuild or differs from it only as real
    brokers write indexes (after restarts, follower fetches, ``recover``): every lookup through it
    is right (``kafka.index.check_broker_index``). A damaged one names the entry and its byte.
    The transaction index, which no such history changes, is compared byte for byte."""
    if stored is None or kind == ObjectKind.TRANSACTION_INDEX:
        return compare_index(kind, stored, rebuilt)
    judged = check_broker_index(
        "offset" if kind == ObjectKind.OFFSET_INDEX else "time",
        stored,
        rebuilt,
        log_path,
        base_offset,
        is_active=is_active,
        path=path,
    )
    if judged.verdict == IndexVerdict.IDENTICAL:
        return IndexFinding(kind, IndexStatus.OK, len(stored), len(rebuilt))
    if judged.verdict == IndexVerdict.EQUIVALENT:
        return IndexFinding(kind, IndexStatus.OK, len(stored), len(rebuilt), f"equivalent: {judged.detail}")
    return IndexFinding(kind, IndexStatus.DIFFERED, len(stored), len(rebuilt), judged.detail)


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


def _stored(storage: RemoteStorage, ref: RemoteSegmentRef, kind: ObjectKind) -> bytes | None:
    if storage.object_size(ref.key(kind, storage.prefix)) is None:
        return None
    return storage.fetch(ref, kind)


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
    with storage.open_stream(segment_ref(segment), ObjectKind.LOG) as source, target.open("wb") as sink:
        while chunk := source.read(DOWNLOAD_CHUNK):
            value = crc32c(chunk, value)
            size += len(chunk)
            sink.write(chunk)
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
    snapshot = _stored(storage, ref, ObjectKind.PRODUCER_SNAPSHOT)
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
        data = _stored(storage, ref, kind)
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
    ref = segment_ref(segment)
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
            stored = {kind: _stored(storage, ref, kind) for kind in INDEX_KINDS}
            findings = tuple(
                judge_index(kind, stored[kind], _rebuilt_bytes(rebuilt, kind), log_path, segment.start_offset)
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
                manifest = _copy_repaired(storage, task.repair_ref, log_path, rebuilt, stored, carried)
            except RemoteStorageError as exc:
                check = replace(check, error=f"repair failed: {exc}")
        return RemoteIndexExamination(replace(check, seconds=time.monotonic() - started), manifest, dict(ongoing))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _copy_repaired(
    storage: RemoteStorage,
    target: RemoteSegmentRef,
    log_path: Path,
    rebuilt: RebuiltIndexes,
    stored: dict[ObjectKind, bytes | None],
    carried: dict[ObjectKind, bytes],
) -> SegmentManifest:
    """The segment's objects under the new attempt: the proven log, rebuilt indexes, the proven
    snapshot and leader-epoch index."""
    files: dict[ObjectKind, Path | bytes] = {
        ObjectKind.LOG: log_path,
        ObjectKind.OFFSET_INDEX: rebuilt.offset_index,
        ObjectKind.TIME_INDEX: rebuilt.time_index,
    }
    if rebuilt.txn_index or stored.get(ObjectKind.TRANSACTION_INDEX) is not None:
        files[ObjectKind.TRANSACTION_INDEX] = rebuilt.txn_index
    files.update(carried)
    return storage.copy_segment(target, files)


# --- remote segments: metadata on the driver ------------------------------------------------


def start_index_repair(
    store: RemoteLogMetadataStore, damaged: RemoteLogSegmentMetadata, lease: Lease
) -> RemoteLogSegmentMetadata:
    """COPY_SEGMENT_STARTED for the repaired copy (a fresh UUID), before anything is uploaded."""
    attempt = replace(
        damaged,
        segment_id=uuid.uuid4(),
        state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
        writer_token=lease.token,
        event_time=int(time.time() * 1000),
        custom_metadata={},
    )
    store.add_segment(attempt, lease)
    return attempt


def finish_index_repair(
    store: RemoteLogMetadataStore,
    storage: RemoteStorage,
    damaged: RemoteLogSegmentMetadata,
    attempt: RemoteLogSegmentMetadata,
    manifest: SegmentManifest,
    lease: Lease,
) -> RemoteLogSegmentMetadata:
    """FINISHED with the new checksums (the copy now serves the range), then the damaged one is deleted.

    FencedError only from the FINISHED step (nothing of the repair serves yet). Losing the lease
    after it leaves two finished copies of the range; the next rebuild deletes the superseded one.
    """
    finished = store.update_segment_state(
        attempt.segment_id,
        RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
        lease,
        custom_metadata=CopyRecord.of_manifest(manifest).to_custom_metadata(),
    )
    try:
        delete_remote_segment(store, storage, damaged, lease)
    except FencedError as exc:
        log.warning(
            "%s: lost the lease before deleting segment %s, superseded by its repaired copy %s "
            "(the next rebuild deletes it): %s",
            damaged.topic_id_partition.topic_partition,
            damaged.segment_id,
            attempt.segment_id,
            exc,
        )
    return finished


def abandon_index_repair(
    store: RemoteLogMetadataStore, storage: RemoteStorage, attempt: RemoteLogSegmentMetadata, lease: Lease | None
) -> None:
    """The repaired copy did not complete: delete it the usual way; the damaged one stays."""
    abandon_attempt(store, storage, attempt, lease, "repair attempt")


def clean_up_interrupted_repairs(
    store: RemoteLogMetadataStore, storage: RemoteStorage, tip: TopicIdPartition, lease: Lease
) -> int:
    """A repair killed between its FINISHED and the damaged attempt's deletion leaves two finished
    copies of one range; the earlier (superseded) one is deleted, so coverage is never doubled."""
    latest: dict[tuple[int, int, tuple[tuple[int, int], ...]], RemoteLogSegmentMetadata] = {}
    duplicates = []
    for s in sorted(finished_segments(store, tip), key=lambda s: s.event_time):
        key = (s.start_offset, s.end_offset, tuple(sorted(s.leader_epochs.items())))
        if key in latest:
            duplicates.append(latest[key])
        latest[key] = s
    for s in duplicates:
        log.warning(
            "%s: deleting segment %s [%d..%d], superseded by an identical copy",
            tip.topic_partition,
            s.segment_id,
            s.start_offset,
            s.end_offset,
        )
        delete_remote_segment(store, storage, s, lease)
    return len(duplicates)


def predecessors(segments: list[RemoteLogSegmentMetadata]) -> dict[uuid.UUID, RemoteLogSegmentMetadata | None]:
    """Per finished segment, the latest finished segment ending just below it (its snapshot's source)."""
    by_end: dict[int, RemoteLogSegmentMetadata] = {}
    for s in sorted(segments, key=lambda s: s.event_time):
        by_end[s.end_offset] = s
    return {s.segment_id: by_end.get(s.start_offset - 1) for s in segments}


def finished_segments(store: RemoteLogMetadataStore, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
    return [s for s in store.list_segments(tip) if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]


def remote_index_tasks(
    store: RemoteLogMetadataStore, tip: TopicIdPartition, index_interval_bytes: int
) -> list[RemoteIndexTask]:
    """One examination per finished remote segment of a partition, in offset order."""
    segments = finished_segments(store, tip)
    previous = predecessors(segments)
    return [RemoteIndexTask(s, previous[s.segment_id], index_interval_bytes) for s in segments]


def rebuild_segment_indexes(
    ctx: TieringContext, task: RemoteIndexTask, *, repair: bool, lease: Lease | None = None
) -> IndexCheck:
    """Check one remote segment's indexes; with ``repair``, replace a damaged one (needs the lease)."""
    first = examine_remote_segment(ctx.storage, task)
    if not (repair and first.check.needs_repair):
        return first.check
    return repair_remote_segment(ctx, task, first, lease)


def repair_task(
    task: RemoteIndexTask, found: RemoteIndexExamination, attempt: RemoteLogSegmentMetadata
) -> RemoteIndexTask:
    """The examination that copies the segment again, with the producer state the check used."""
    return replace(task, repair_ref=segment_ref(attempt), open_transactions=found.open_transactions)


def repair_remote_segment(
    ctx: TieringContext, task: RemoteIndexTask, found: RemoteIndexExamination, lease: Lease | None
) -> IndexCheck:
    """STARTED for a new attempt, copy it with rebuilt indexes, then FINISHED and the damaged one deleted."""
    if lease is None:
        raise TieringError(f"{task.segment.topic_id_partition}: repairing indexes needs the partition's lease")
    attempt = start_index_repair(ctx.metadata, task.segment, lease)
    second = examine_remote_segment(ctx.storage, repair_task(task, found, attempt))
    return commit_index_repair(ctx, task.segment, attempt, found.check, second, lease)


def commit_index_repair(
    ctx: TieringContext,
    damaged: RemoteLogSegmentMetadata,
    attempt: RemoteLogSegmentMetadata,
    found: IndexCheck,
    examination: RemoteIndexExamination,
    lease: Lease | None,
) -> IndexCheck:
    """Finish the repaired copy, or clean it up when the repair upload did not complete.

    ``lease`` None (or a lease lost meanwhile): the run was fenced, the repair's objects are
    deleted and the segment is reported unrepaired.
    """
    if examination.manifest is None:
        abandon_index_repair(ctx.metadata, ctx.storage, attempt, lease)
        if examination.check.error is not None:
            return replace(found, error=examination.check.error, damaged_log=examination.check.damaged_log)
        return examination.check  # nothing to repair any more
    try:
        if lease is None:
            raise FencedError(f"{attempt.topic_id_partition}: the partition's lease was lost")
        finish_index_repair(ctx.metadata, ctx.storage, damaged, attempt, examination.manifest, lease)
    except FencedError as exc:
        abandon_index_repair(ctx.metadata, ctx.storage, attempt, None)
        return replace(
            found,
            error=f"repair not finished, the run lost the partition's lease (the repaired copy {attempt.segment_id} "
            f"was deleted): {exc}",
        )
    return replace(found, repaired_as=str(attempt.segment_id), seconds=found.seconds + examination.check.seconds)


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
    return path.read_bytes()


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


# --- one partition, one process (the ``tiering rebuild-indexes`` command) -------------------


@dataclass
class RebuildResult:
    topic: str
    partition: int
    repair: bool
    busy: bool = False  # another run held the partition's lease
    superseded_deleted: int = 0  # leftovers of an interrupted repair
    segments_cleaned_up: int = 0  # copies or repairs a killed run left unfinished
    checks: list[IndexCheck] = field(default_factory=list)
    seconds: float = 0.0

    def count(self, status: IndexStatus) -> int:
        return sum(1 for c in self.checks if c.status == status)

    @property
    def log_bytes(self) -> int:
        return sum(c.log_bytes for c in self.checks)

    @property
    def unresolved(self) -> list[IndexCheck]:
        """Segments still damaged after the run (or not checkable)."""
        return [c for c in self.checks if c.status not in (IndexStatus.OK, IndexStatus.REPAIRED)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "repair": self.repair,
            "busy": self.busy,
            "superseded_deleted": self.superseded_deleted,
            "segments_cleaned_up": self.segments_cleaned_up,
            "segments": len(self.checks),
            **{status.value: self.count(status) for status in IndexStatus},
            "log_bytes": self.log_bytes,
            "seconds": round(self.seconds, 3),
            "checks": [c.to_dict() for c in self.checks],
        }


def hold_for_rebuild(ctx: TieringContext, tip: TopicIdPartition, run_id: str, hold: ExitStack) -> HeldPartition | None:
    """Hold the partition for a rebuild until ``hold`` closes (None when a copy, retention or
    removal run holds it)."""
    ctx.metadata.register_partition(tip)
    try:
        return hold.enter_context(held_partition(ctx.metadata, tip, holder=f"rebuild-indexes:{run_id}", run_id=run_id))
    except LeaseHeldError as exc:
        log.info("%s: another run holds the partition (%s); not checked", tip.topic_partition, exc)
        return None


def clean_up_before_repair(ctx: TieringContext, tip: TopicIdPartition, lease: Lease, result: RebuildResult) -> None:
    """What killed runs left (we hold the lease): unfinished copies and repairs in a STARTED
    state are deleted as the copy engine's recovery does, and of two finished copies of one
    range the superseded one."""
    result.segments_cleaned_up = recover_failed_copies(ctx.metadata, ctx.storage, tip, lease)
    result.superseded_deleted = clean_up_interrupted_repairs(ctx.metadata, ctx.storage, tip, lease)


def rebuild_partition_indexes(
    ctx: TieringContext,
    tp: TopicPartition,
    *,
    repair: bool = True,
    local: bool = False,
    run_id: str | None = None,
    progress: Progress | None = None,
) -> RebuildResult:
    """Check (and repair) every finished remote segment of a partition; ``local`` adds the broker's.

    One progress line per segment; the caller prints ``format_rebuild_summary`` over its partitions.
    """
    say = progress or (lambda line: log.info("%s", line))
    started = time.monotonic()
    result = RebuildResult(tp.topic, tp.partition, repair)
    partition_log = ctx.partitions(tp.topic, tp.partition)[0]
    interval = ctx.config.topic_config(tp.topic).index_interval_bytes
    tip = TopicIdPartition(partition_log.topic_id, tp)
    tasks: list[RemoteIndexTask] = []
    with ExitStack() as hold:
        held = hold_for_rebuild(ctx, tip, run_id or uuid.uuid4().hex, hold)
        if held is None:
            result.busy = True
            say(f"{tp}: another run holds the partition; indexes not checked")
            return result

        def holding(done: int) -> Lease:
            """After each step (renewed now, as a step may outlast a beat): still held, or stop."""
            if not held.renew():
                raise TieringError(
                    f"{tp}: lost the partition's lease after {done} of {len(tasks)} segment(s); stopped "
                    f"(nothing half-done is left): {held.lost}"
                )
            return held.lease

        if repair:
            clean_up_before_repair(ctx, tip, held.lease, result)
        # Every segment is examined before any is repaired: a repair deletes the damaged
        # attempt, whose producer snapshot the next segment's examination may need.
        tasks = remote_index_tasks(ctx.metadata, tip, interval)
        found = []
        for task in tasks:
            found.append(examine_remote_segment(ctx.storage, task))
            holding(len(found))
        for done, (task, examination) in enumerate(zip(tasks, found, strict=True), start=1):
            check = examination.check
            if repair and check.needs_repair:
                check = repair_remote_segment(ctx, task, examination, held.lease)
                holding(done)
            result.checks.append(check)
            say(check.describe())
    if local:
        for local_task in local_index_tasks(partition_log, interval):
            check = check_local_segment(local_task)
            result.checks.append(check)
            say(check.describe())
    result.seconds = time.monotonic() - started
    return result
