"""``tiering verify``: every finished remote segment against its manifest and its metadata.

docs/architecture.md invariant 2: a COPY_SEGMENT_FINISHED segment's objects exist and match their manifest's
sizes and checksums. Each object is streamed once (``RemoteStorage.verify_segment``); the
manifest is also compared with the checksums the metadata recorded when the copy finished, so
a manifest rewritten behind the platform's back is caught too. Nothing is changed but the
partition's counters (each segment checked is a remote fetch, each damaged one a scrub failure).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tiering_core.errors import NoRemoteDataError, TieringError
from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.metrics import names
from tiering_core.metrics.tally import tallied
from tiering_core.runs.segment_ops import segment_ref
from tiering_core.storage.errors import ManifestError
from tiering_core.storage.manifest import CopyRecord

if TYPE_CHECKING:
    from tiering_core.context import TieringContext
    from tiering_core.kafka.topic import TopicPartition
    from tiering_core.metadata.store import RemoteLogSegmentMetadata
    from tiering_core.storage.segments import RemoteStorage


@dataclass
class SegmentVerification:
    topic: str
    partition: int
    segment_id: str
    start_offset: int
    end_offset: int
    size_bytes: int
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "segment_id": self.segment_id,
            "start_offset": self.start_offset,
            "end_offset": self.end_offset,
            "size_bytes": self.size_bytes,
            "ok": self.ok,
            "problems": list(self.problems),
        }

    def describe(self) -> str:
        head = f"{self.topic}-{self.partition}: segment {self.start_offset}..{self.end_offset} ({self.segment_id})"
        return f"{head}: ok" if self.ok else f"{head}: " + "; ".join(self.problems)


def verify_segment(storage: RemoteStorage, segment: RemoteLogSegmentMetadata) -> SegmentVerification:
    """One segment's objects against its manifest, and the manifest against the metadata.
    Touches only storage, so it runs anywhere (e.g. a Spark executor)."""
    tp = segment.topic_id_partition.topic_partition
    result = SegmentVerification(
        tp.topic, tp.partition, str(segment.segment_id), segment.start_offset, segment.end_offset, segment.size_bytes
    )
    ref = segment_ref(segment)
    result.problems.extend(storage.verify_segment(ref))
    if result.problems:
        return result
    try:
        manifest = storage.read_manifest(ref)
    except ManifestError as exc:
        result.problems.append(f"manifest: {exc}")
        return result
    recorded = CopyRecord.of_segment(segment).crc32c
    if manifest is not None and recorded:
        stored = {kind.value: entry.crc32c for kind, entry in manifest.objects.items()}
        for kind in sorted(set(recorded) | set(stored)):
            if recorded.get(kind) != stored.get(kind):
                result.problems.append(
                    f"{kind}: manifest crc32c {stored.get(kind)} != {recorded.get(kind)} "
                    "recorded when the copy finished"
                )
    return result


def partitions_to_verify(
    ctx: TieringContext, topic: str | None = None, partition: int | None = None
) -> list[TopicIdPartition]:
    """The partitions ``verify`` covers, as selected: on a broker, those in its log dirs (the topic
    id of their directory); where the process serves no broker, every partition the metadata store
    holds live remote data of, whichever broker copied it (verify reads no log dir)."""
    if not ctx.config.serves_no_broker:
        return [TopicIdPartition(log.topic_id, log.topic_partition) for log in ctx.partitions(topic, partition)]
    if partition is not None and topic is None:
        raise TieringError("--partition needs --topic")
    found = sorted(
        (
            r.topic_id_partition
            for r in ctx.metadata.list_partitions()
            if r.live and topic in (None, r.topic) and partition in (None, r.partition)
        ),
        key=lambda tip: (tip.topic, tip.partition, tip.topic_id),
    )
    if not found and topic is not None:
        raise NoRemoteDataError(topic if partition is None else f"{topic}-{partition}")
    return found


def segments_to_verify(ctx: TieringContext, tp: TopicPartition | TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
    """Every finished segment of the partition (inside the lineage or not), by start offset; a
    partition named without its topic id is the one in this broker's log dirs."""
    tip = tp if isinstance(tp, TopicIdPartition) else TopicIdPartition(ctx.partition_log(tp).topic_id, tp)
    return [s for s in ctx.metadata.list_segments(tip) if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]


def verify_partition(ctx: TieringContext, tp: TopicPartition | TopicIdPartition) -> list[SegmentVerification]:
    """Every finished segment of the partition verified. Each segment's check is a remote fetch
    request (its objects' recorded bytes read, an error when it cannot be done) and a damaged or
    missing segment a scrub failure, stored in the partition's counters at the end (on no broker)."""
    segments = segments_to_verify(ctx, tp)
    if not segments:
        return []
    results: list[SegmentVerification] = []
    with tallied(ctx.metadata, segments[0].topic_id_partition) as tally:
        for segment in segments:
            with tally.request(names.REMOTE_FETCH_REQUESTS, names.REMOTE_FETCH_ERRORS):
                checked = verify_segment(ctx.storage, segment)
            read = sum(CopyRecord.of_segment(segment).sizes.values())
            if read:
                tally.count(names.REMOTE_FETCH_BYTES, read)
            if not checked.ok:
                tally.count(names.SCRUB_FAILURES)
            results.append(checked)
    return results
