"""Re-encode a partition's remote segments in place (``tiering rewrite``, docs/segment-format.md):
a key rotation, or a compression or encryption backfill, for segments copied before the
``remote:`` settings changed.

Under the partition's lease, like every writer: first what killed runs left is finished (a
started copy deleted, a started deletion done again, as a copy run's recovery does); then each
finished segment whose manifest is not stored as a copy made now would be is copied again under
a fresh segment id (the original bytes streamed out through the storage's reader and checked
against the checksums recorded at copy time, then COPY_SEGMENT_STARTED and the upload in the
current format, manifest last: ``replace_segment``, which erase uses too). The new copy's
COPY_SEGMENT_FINISHED and the old one's DELETE_SEGMENT_STARTED land in one fenced transaction,
so the range is served by exactly one of them at every instant; the old objects are deleted
after. A run killed anywhere leaves a STARTED copy or a started deletion, which the next run (of
rewrite, copy, retention or rebuild-indexes) finishes; the segment is then rewritten again or
already is.
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tiering_core.engine.download import download_object
from tiering_core.engine.lease import held_partition
from tiering_core.engine.segment_ops import (
    abandon_attempt,
    delete_remote_segment,
    recover_failed_copies,
    segment_facts,
    segment_ref,
    stored_epoch_index,
)
from tiering_core.errors import TieringError
from tiering_core.kafka.epoch import EpochEntry
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.runs.rebuild.repair import start_index_repair
from tiering_core.storage.key_filter import with_key_filter
from tiering_core.storage.layout import ObjectKind
from tiering_core.storage.manifest import CopyRecord, SegmentManifest

if TYPE_CHECKING:
    from tiering_core.context import TieringContext
    from tiering_core.metadata.store import RemoteLogSegmentMetadata, TaskAttempt

log = logging.getLogger(__name__)


@dataclass
class RewriteResult:
    """One partition's rewrite: segments copied again, left as they were (already current), and
    cleaned up after a killed run; stored bytes before and after the rewritten ones."""

    topic: str
    partition: int
    segments_rewritten: int = 0
    segments_current: int = 0
    segments_cleaned_up: int = 0
    stored_bytes_before: int = 0
    stored_bytes_after: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe, for ``--json`` and XCom."""
        return {**asdict(self), "seconds": round(self.seconds, 3)}


def run_rewrite(
    ctx: TieringContext,
    partition: TopicPartition | TopicIdPartition,
    *,
    run_id: str | None = None,
    attempt: TaskAttempt | None = None,
) -> RewriteResult:
    """Re-encode ``partition``'s finished remote segments not stored in the current format; named
    without its topic id, it is the one in this broker's log dirs (with it, as the metadata store
    holds it: a process that serves no broker reads no log dir, ``TieringContext.selected_partitions``)."""
    started = time.monotonic()
    if isinstance(partition, TopicIdPartition):
        tip = partition
    else:
        tip = TopicIdPartition(ctx.partition_log(partition).topic_id, partition)
    tp = tip.topic_partition
    result = RewriteResult(tp.topic, tp.partition)
    run = run_id or uuid.uuid4().hex
    ctx.storage.require_writable()
    ctx.metadata.register_partition(tip)
    with held_partition(ctx.metadata, tip, holder=f"rewrite:{run}", run_id=run, attempt=attempt) as held:
        result.segments_cleaned_up = recover_failed_copies(ctx.metadata, ctx.storage, tip, held.require())
        finished = [
            s for s in ctx.metadata.list_segments(tip) if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        ]
        for segment in sorted(finished, key=lambda s: (s.start_offset, s.event_time)):
            manifest = ctx.storage.read_manifest(segment_ref(segment))
            if manifest is None:
                raise TieringError(f"{tp}: segment {segment.segment_id} has no manifest (run tiering verify)")
            if CopyRecord.of_segment(segment).tamper_evident and ctx.storage.encoding.stores_like(manifest):
                result.segments_current += 1
                continue
            result.stored_bytes_before += sum(e.stored_size or e.size for e in manifest.objects.values())
            kinds: list[ObjectKind] = [k for k in manifest.objects if k != ObjectKind.KEY_FILTER]  # made anew
            rewritten = _rewrite_segment(ctx, segment, kinds, held)
            result.stored_bytes_after += rewritten
            result.segments_rewritten += 1
    result.seconds = time.monotonic() - started
    return result


def _rewrite_segment(ctx: TieringContext, segment: RemoteLogSegmentMetadata, kinds: list[ObjectKind], held: Any) -> int:
    """Copy one segment again in the current format and put the copy in its place; the copy's
    stored bytes."""
    with tempfile.TemporaryDirectory(prefix="tiering-rewrite-") as work:
        files = {kind: Path(work) / kind.value for kind in kinds}
        for kind, target in files.items():
            download_object(ctx.storage, segment, kind, target)  # checked against the record
        manifest = replace_segment(ctx, segment, dict(files), held, what="rewrite")
    return sum(e.stored_size or e.size for e in manifest.objects.values())


def replace_segment(
    ctx: TieringContext,
    segment: RemoteLogSegmentMetadata,
    files: Mapping[ObjectKind, Path | bytes],
    held: Any,
    *,
    size_bytes: int | None = None,
    what: str = "rewrite",
) -> SegmentManifest:
    """Upload ``files`` as a new copy of the finished ``segment`` (a fresh segment id, same
    offsets and leader epochs; ``size_bytes``: its log's size when it differs) and put it in the
    segment's place: its FINISHED and the old one's DELETE_SEGMENT_STARTED in one fenced
    transaction, the old objects deleted after. Its manifest holds the segment's metadata, and as
    its epoch index the leader-epoch checkpoint it uploads again; beside the log, its key filter
    (made anew, so a segment copied before filters gets one). Rewrite and erase both do it here."""
    store, storage = ctx.metadata, ctx.storage
    started = segment if size_bytes is None else dataclasses.replace(segment, size_bytes=size_bytes)
    copy = start_index_repair(store, started, held.require())  # COPY_SEGMENT_STARTED, a fresh id
    try:
        epoch_index: tuple[EpochEntry, ...] = ()
        checkpoint = files.get(ObjectKind.LEADER_EPOCH_CHECKPOINT)
        if checkpoint is not None:
            key = segment_ref(segment).key(ObjectKind.LEADER_EPOCH_CHECKPOINT, storage.prefix)
            epoch_index = stored_epoch_index(checkpoint, key)
        facts = segment_facts(copy, epoch_index)
        manifest = storage.copy_segment(segment_ref(copy), with_key_filter(files), facts=facts)
        held.renew()
        store.supersede_segment(
            segment.segment_id,
            copy.segment_id,
            held.require(),
            custom_metadata=CopyRecord.of_manifest(manifest).to_custom_metadata(),
        )
    except Exception:
        abandon_attempt(store, storage, copy, held.lease if held.holds else None, what)
        raise
    log.info(
        "%s: segment %s [%d..%d] %s as %s",
        segment.topic_id_partition.topic_partition,
        segment.segment_id,
        segment.start_offset,
        segment.end_offset,
        "rewritten" if what == "rewrite" else f"copied again ({what})",
        copy.segment_id,
    )
    delete_remote_segment(store, storage, segment, held.require())
    return manifest
