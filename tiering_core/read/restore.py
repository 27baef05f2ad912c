"""``tiering restore``: a partition's remote tier written back as a Kafka partition directory.

For disaster recovery (a broker lost its disk) or to read tiered data with Kafka's own tools.
The segments the remote tier serves (finished, in the lineage, from the global log start to the
highest copied offset; where re-uploads overlap, the one ``segment_for`` picks) are written to
``<target>/<topic>-<partition>/`` under the broker's own names: ``<base>.log``, ``.index``,
``.timeindex``, ``.txnindex`` (when stored) and the producer snapshot at the next base offset,
plus ``leader-epoch-checkpoint`` (the lineage up to the restored end) and ``partition.metadata``;
the target's root checkpoints get the partition's log start, recovery point and high watermark.

Every object is checked against the CRC-32C the metadata recorded at copy time as it streams
to disk. The partition is assembled in a staging directory (``staging_dir``) and renamed into
place only when complete, so a failure leaves nothing behind. An existing partition directory in the target is
never overwritten. A target holding ``meta.properties`` or checkpoint files is some broker's
log dir, even one the config does not name: refused unless forced (a target an earlier restore
wrote, marked ``tiering-restored``, takes more partitions). Rewritten checkpoints keep their
file modes.

Disaster recovery restores into the broker's own log dir (``--force``; any other directory
inside a configured log dir is refused): only while that broker is stopped. The broker holds a
lock on ``<log dir>/.lock`` while it runs (``FileChannel.tryLock``, a POSIX record lock); the
restore takes the same lock for its whole run, so it refuses a running broker and a broker
cannot start under it. When the broker no longer holds the partition (the directory was lost),
the remote tier is read from the metadata alone: the one topic id of the partition that is
neither dropped nor being removed.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tiering_core.engine.download import download_object
from tiering_core.errors import TieringError
from tiering_core.events import EventSink, discard
from tiering_core.events.read import RestoringFromTierAlone, SegmentRestored
from tiering_core.kafka.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    update_offset_checkpoints,
    write_leader_epoch_checkpoint,
    write_partition_metadata,
)
from tiering_core.kafka.log_dirs import META_PROPERTIES, delete_dir_name
from tiering_core.kafka.partition_log import LEADER_EPOCH_CHECKPOINT
from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.metrics import names
from tiering_core.read.reader import open_reader, open_remote_reader
from tiering_core.storage.layout import ObjectKind

if TYPE_CHECKING:
    from tiering_core.context import TieringContext
    from tiering_core.kafka.topic import TopicPartition
    from tiering_core.metadata.store import RemoteLogSegmentMetadata
    from tiering_core.read.reader import RemoteLogReader

log = logging.getLogger(__name__)

#: The file a running broker holds a lock on, in each of its log dirs (``LogManager.LockFileName``).
BROKER_LOCK_FILE = ".lock"
#: The file a restore leaves in its target: more partitions may be restored there.
RESTORE_MARKER = "tiering-restored"
#: The broker's root checkpoint files: a directory holding one is a Kafka log dir.
KAFKA_CHECKPOINTS = (
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    "cleaner-offset-checkpoint",
)
#: Object kinds restored beside each ``.log``, and the local file suffix each becomes.
SEGMENT_FILES = {
    ObjectKind.LOG: "log",
    ObjectKind.OFFSET_INDEX: "index",
    ObjectKind.TIME_INDEX: "timeindex",
    ObjectKind.TRANSACTION_INDEX: "txnindex",
}


@dataclass
class RestoreResult:
    topic: str
    partition: int
    directory: Path
    segments: int = 0
    bytes: int = 0
    log_start_offset: int | None = None
    end_offset: int | None = None  # the last restored offset
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "directory": str(self.directory),
            "segments": self.segments,
            "bytes": self.bytes,
            "log_start_offset": self.log_start_offset,
            "end_offset": self.end_offset,
            "seconds": round(self.seconds, 3),
        }


def served_chain(reader: RemoteLogReader) -> list[RemoteLogSegmentMetadata]:
    """The served segments from the log start on, one per offset range, as a broker would hold them."""
    chain: list[RemoteLogSegmentMetadata] = []
    offset = reader.log_start_offset
    if offset is None:
        return chain
    while offset <= reader.highest_offset:
        segment = reader.segment_for(offset)
        if segment is None:
            break
        if chain and segment.start_offset <= chain[-1].end_offset:
            # A re-upload that starts inside an earlier choice: keep only what it does not cover.
            while chain and chain[-1].start_offset >= segment.start_offset:
                chain.pop()
            if chain and chain[-1].end_offset >= segment.start_offset:
                raise TieringError(
                    f"{reader.tp}: remote segments {chain[-1].segment_id} and {segment.segment_id} overlap in "
                    f"[{segment.start_offset}..{chain[-1].end_offset}]; run retention first"
                )
        elif chain and segment.start_offset > chain[-1].end_offset + 1:
            log.warning(
                "%s: offsets %d..%d are not in the remote tier (a tiering gap); restored around them",
                reader.tp,
                chain[-1].end_offset + 1,
                segment.start_offset - 1,
            )
        chain.append(segment)
        offset = segment.end_offset + 1
    return chain


def staging_dir(target: Path, tp: TopicPartition, *, broker_log_dir: bool) -> Path:
    """Where the partition is assembled before its rename into place.

    In a plain target a hidden directory. In a broker's log dir every directory must be one the
    broker can parse (it refuses to start on any other, a hidden one included), so there it is
    named as a deleted partition's (``<topic>-<partition>.<uuid>-delete``): left by a killed
    restore, the broker deletes it when it starts. It never holds ``partition.metadata`` (written
    after the rename), so it is no evidence that the partition was deleted.
    """
    if broker_log_dir:
        return target / delete_dir_name(tp)
    return target / f".{tp.topic}-{tp.partition}.restoring"


def _refuse_a_kafka_log_dir(target: Path) -> None:
    """TieringError if ``target`` looks like a broker's log dir that no earlier restore wrote."""
    if (target / RESTORE_MARKER).is_file() and not (target / META_PROPERTIES).exists():
        return
    found = [name for name in (META_PROPERTIES, *KAFKA_CHECKPOINTS) if (target / name).exists()]
    if found:
        raise TieringError(
            f"restore target {target} holds {', '.join(found)}: it is a Kafka log dir; restore into an empty "
            "directory, or pass --force to write into it anyway"
        )


@contextmanager
def _broker_stopped(log_dir: Path) -> Iterator[None]:
    """Hold the lock a running broker holds on its log dir (refused while it does), so that no
    broker starts on ``log_dir`` while the restore writes into it."""
    path = log_dir / BROKER_LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise TieringError(f"restore target {log_dir}: cannot open the broker's lock file {path}: {exc}") from exc
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                raise TieringError(
                    f"restore target {log_dir} is the log dir of a running broker (it holds {path}); "
                    "stop the broker first"
                ) from None
            raise TieringError(f"restore target {log_dir}: cannot lock {path}: {exc}") from exc
        yield
    finally:
        os.close(fd)  # releases the lock


def restore_reader(ctx: TieringContext, tp: TopicPartition, events: EventSink) -> RemoteLogReader:
    """The broker's partition joined with its remote tier; when the broker holds no directory of
    it (a lost disk), the remote tier of its one live topic id, from the metadata alone."""
    try:
        held = any(p.topic_partition == tp for p in ctx.partitions())
    except TieringError:
        held = False  # a lost log dir holds nothing
    if held:
        return open_reader(ctx, tp)
    records = ctx.metadata.list_partitions()
    live = [r for r in records if r.topic_partition == tp and r.live]
    if len(live) != 1:
        known = ", ".join(r.topic_id for r in live) or "none"
        raise TieringError(
            f"{tp} is not in the broker's log dirs, and the metadata does not name one topic id to restore "
            f"(live topic ids: {known})"
        )
    tip = TopicIdPartition(live[0].topic_id, tp)
    events(RestoringFromTierAlone(tp, tip.topic_id))
    return open_remote_reader(ctx, tip)


def restore_partition(
    ctx: TieringContext,
    tp: TopicPartition,
    target: Path,
    *,
    events: EventSink = discard,
    force: bool = False,
) -> RestoreResult:
    """Write the partition's remote tier to ``target/<topic>-<partition>``; see the module docstring.
    ``force`` writes into a target that looks like a Kafka log dir."""
    started = time.monotonic()
    target = target.resolve()
    for log_dir in ctx.config.all_log_dirs():  # every configured broker's
        root = log_dir.resolve()
        if (target == root and not force) or root in target.parents:
            raise TieringError(
                f"restore target {target} is inside the broker's log dir {log_dir}; choose another "
                "(or, for disaster recovery with that broker stopped, the log dir itself with --force)"
            )
    final = target / f"{tp.topic}-{tp.partition}"
    if final.exists():
        raise TieringError(f"{final} already exists; restore never overwrites a partition directory")
    if not force:
        _refuse_a_kafka_log_dir(target)
    if (target / META_PROPERTIES).exists():
        with _broker_stopped(target):
            return _restore(ctx, tp, target, events, started, broker_log_dir=True)
    return _restore(ctx, tp, target, events, started, broker_log_dir=False)


def _restore(
    ctx: TieringContext,
    tp: TopicPartition,
    target: Path,
    events: EventSink,
    started: float,
    *,
    broker_log_dir: bool,
) -> RestoreResult:
    final = target / f"{tp.topic}-{tp.partition}"
    reader = restore_reader(ctx, tp, events)
    chain = served_chain(reader)
    if not chain:
        raise TieringError(f"{tp.topic}-{tp.partition}: the remote tier holds no data to restore")
    result = RestoreResult(tp.topic, tp.partition, final, log_start_offset=reader.log_start_offset)
    target.mkdir(parents=True, exist_ok=True)
    work = staging_dir(target, tp, broker_log_dir=broker_log_dir)
    shutil.rmtree(work, ignore_errors=True)  # leftovers of a killed earlier restore
    work.mkdir()
    tally = reader.tally  # each segment's download is a remote fetch request, stored at the end
    try:
        for segment in chain:
            stem = f"{segment.start_offset:020d}"
            tally.count(names.REMOTE_FETCH_REQUESTS)
            before = result.bytes
            try:
                for kind, suffix in SEGMENT_FILES.items():
                    size = download_object(ctx.storage, segment, kind, work / f"{stem}.{suffix}")
                    result.bytes += max(size, 0)
                snapshot = work / f"{segment.end_offset + 1:020d}.snapshot"
                result.bytes += max(download_object(ctx.storage, segment, ObjectKind.PRODUCER_SNAPSHOT, snapshot), 0)
            except Exception:
                tally.count(names.REMOTE_FETCH_ERRORS)
                raise
            finally:
                if result.bytes > before:
                    tally.count(names.REMOTE_FETCH_BYTES, result.bytes - before)
            result.segments += 1
            result.end_offset = segment.end_offset
            events(
                SegmentRestored(tp, segment.start_offset, segment.end_offset, result.segments, len(chain), result.bytes)
            )
        end = chain[-1].end_offset
        lineage = reader.view.lineage.truncate_from_end(end + 1)
        write_leader_epoch_checkpoint(work / LEADER_EPOCH_CHECKPOINT, list(lineage.entries))
        if not broker_log_dir:
            write_partition_metadata(work / PARTITION_METADATA, reader.view.tip.topic_id)
        os.replace(work, final)
        if broker_log_dir:  # only now: a -delete dir holding a topic id is the evidence of a deletion
            write_partition_metadata(final / PARTITION_METADATA, reader.view.tip.topic_id)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    finally:
        tally.store(ctx.metadata)
    _write_root_checkpoints(target, tp, result, chain[0].start_offset)
    marker = target / RESTORE_MARKER
    if not broker_log_dir and not marker.exists():
        marker.write_text("written by tiering restore: its checkpoint files are the restored partitions'\n")
    result.seconds = time.monotonic() - started
    return result


def _write_root_checkpoints(target: Path, tp: TopicPartition, result: RestoreResult, first_base: int) -> None:
    assert result.end_offset is not None
    next_offset = result.end_offset + 1
    update_offset_checkpoints(target / RECOVERY_POINT_CHECKPOINT, {tp: next_offset})
    update_offset_checkpoints(target / REPLICATION_OFFSET_CHECKPOINT, {tp: next_offset})
    start = result.log_start_offset
    update_offset_checkpoints(
        target / LOG_START_OFFSET_CHECKPOINT, {tp: start if start is not None and start > first_base else None}
    )
