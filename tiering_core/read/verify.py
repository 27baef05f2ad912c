"""``tiering verify``: every finished remote segment against its manifest and its metadata.

docs/architecture.md invariant 2: a COPY_SEGMENT_FINISHED segment's objects exist and match their manifest's
sizes and checksums. Each object is streamed once (``RemoteStorage.verify_segment``); the
manifest is also compared with the digest and checksums the metadata recorded when the copy
finished, so a manifest rewritten behind the platform's back is caught too, and a segment copied
before digests were recorded is named as not tamper-evident. Nothing is changed but the
partition's counters (each segment checked is a remote fetch, each damaged one a scrub failure).

One driver, ``run_verify``, for the command and the Spark app: it lists the finished segments on
the caller's process, hands one ``verify_segment`` per segment to an ``Executor`` (in this
process, or Spark's executors), and keeps the results in the order of the list, emitting an event
per segment as it is checked (docs/architecture.md, "Drivers and executors").
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tiering_core.engine.executor import Executor, InProcessExecutor
from tiering_core.engine.segment_ops import segment_ref
from tiering_core.errors import NoRemoteDataError, TieringError
from tiering_core.events import EventSink, discard
from tiering_core.events.read import SegmentVerification, SegmentVerified, VerifyPlanned
from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.metrics import names
from tiering_core.metrics.tally import Tally, tallied
from tiering_core.storage.errors import ManifestError
from tiering_core.storage.manifest import CopyRecord

if TYPE_CHECKING:
    from tiering_core.context import TieringContext
    from tiering_core.kafka.topic import TopicPartition
    from tiering_core.metadata.store import RemoteLogSegmentMetadata
    from tiering_core.storage.remote import RemoteStorage


def verification_of(segment: RemoteLogSegmentMetadata, problems: Sequence[str] = ()) -> SegmentVerification:
    """The verification of ``segment`` with ``problems`` (none yet: ok)."""
    tp = segment.topic_id_partition.topic_partition
    return SegmentVerification(
        tp.topic,
        tp.partition,
        str(segment.segment_id),
        segment.start_offset,
        segment.end_offset,
        segment.size_bytes,
        list(problems),
    )


def verify_segment(storage: RemoteStorage, segment: RemoteLogSegmentMetadata) -> SegmentVerification:
    """One segment's objects against its manifest, and the manifest against the metadata.
    Touches only storage, so it runs anywhere (e.g. a Spark executor)."""
    result = verification_of(segment)
    result.tamper_evident = CopyRecord.of_segment(segment).tamper_evident
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
    holds live remote data of, whichever broker copied it (verify reads no log dir); so does a
    broker for a topic or partition named that its log dirs no longer hold (its data is in the tier)."""
    if not ctx.config.serves_no_broker:
        try:
            return [TopicIdPartition(log.topic_id, log.topic_partition) for log in ctx.partitions(topic, partition)]
        except TieringError as gone:
            if topic is None:
                raise
            try:
                return ctx.tiered_partitions(topic, partition)
            except NoRemoteDataError:
                raise gone from None
    return ctx.tiered_partitions(topic, partition)


def segments_to_verify(ctx: TieringContext, tp: TopicPartition | TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
    """Every finished segment of the partition (inside the lineage or not), by start offset; a
    partition named without its topic id is the one in this broker's log dirs."""
    tip = tp if isinstance(tp, TopicIdPartition) else TopicIdPartition(ctx.partition_log(tp).topic_id, tp)
    return [s for s in ctx.metadata.list_segments(tip) if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]


@dataclass
class VerifyResult:
    """Every segment's verification, in the order the segments were listed."""

    results: list[SegmentVerification]
    size_bytes: int
    seconds: float

    @property
    def damaged(self) -> list[SegmentVerification]:
        return [r for r in self.results if not r.ok]


def run_verify(
    ctx: TieringContext,
    partitions: Sequence[TopicPartition | TopicIdPartition],
    executor: Executor | None = None,
    events: EventSink = discard,
) -> VerifyResult:
    """Every finished segment of ``partitions`` verified on ``executor`` (default: this process,
    one after the other). Each check is a remote fetch request of its partition (an error when
    its task failed) and a damaged or missing segment a scrub failure, stored in the partitions'
    counters at the end; a task that fails is the segment's problem (on Spark), or the run's error
    (in this process, as a plain loop's)."""
    started = time.monotonic()
    segments = [s for tp in partitions for s in segments_to_verify(ctx, tp)]
    size = sum(s.size_bytes for s in segments)
    events(VerifyPlanned(len(segments), size, len(partitions)))
    results: list[SegmentVerification | None] = [None] * len(segments)
    with contextlib.ExitStack() as stack:
        tallies: dict[TopicIdPartition, Tally] = {}

        def tally_of(segment: RemoteLogSegmentMetadata) -> Tally:
            tip = segment.topic_id_partition
            if tip not in tallies:
                tallies[tip] = stack.enter_context(tallied(ctx.metadata, tip))
            return tallies[tip]

        run = (executor or InProcessExecutor(ctx.storage)).run(
            segments,
            verify_segment,
            describe=lambda s: f"verify {s.topic_id_partition.topic_partition} segment {s.start_offset}",
        )
        with contextlib.closing(run) as outcomes:  # an abort cancels the queued and running checks
            for done in range(1, len(segments) + 1):
                try:
                    outcome = next(outcomes)
                except Exception:  # a check that raised in this process: the first without a result
                    failed = next(s for s, r in zip(segments, results, strict=True) if r is None)
                    tally_of(failed).count(names.REMOTE_FETCH_REQUESTS)
                    tally_of(failed).count(names.REMOTE_FETCH_ERRORS)
                    raise
                segment = segments[outcome.index]
                tally = tally_of(segment)
                tally.count(names.REMOTE_FETCH_REQUESTS)
                checked = outcome.result
                if checked is None:  # the task itself failed (an executor lost, an unreadable tier)
                    tally.count(names.REMOTE_FETCH_ERRORS)
                    checked = verification_of(segment, [outcome.error or "no result"])
                else:
                    read = sum(CopyRecord.of_segment(segment).sizes.values())
                    if read:
                        tally.count(names.REMOTE_FETCH_BYTES, read)
                if not checked.ok:
                    tally.count(names.SCRUB_FAILURES)
                results[outcome.index] = checked
                events(SegmentVerified(checked, done, len(segments)))
    return VerifyResult([r for r in results if r is not None], size, time.monotonic() - started)


def verify_partition(ctx: TieringContext, tp: TopicPartition | TopicIdPartition) -> list[SegmentVerification]:
    """Every finished segment of the partition verified in this process (``run_verify``)."""
    return run_verify(ctx, [tp]).results
