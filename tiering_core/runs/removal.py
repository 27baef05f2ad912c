"""Remote partition removal (docs/kafka-rules.md section 7), triggered by hand.

DELETE_PARTITION_MARKED -> DELETE_PARTITION_STARTED -> every segment deleted -> every object
left under the partition's prefix deleted, its ``partition-state.json`` last ->
DELETE_PARTITION_FINISHED -> the partition's metadata is dropped (a tombstone stays, so the
same topic id is never copied to again). Every step is idempotent: a run killed anywhere is
resumed by running it again, and a rerun after the drop finds the tombstone and reports the
removal finished.

A partition is named by topic and partition, but its remote data belongs to a topic id. A topic
deleted and recreated under the same name gets a new topic id, whose data is live: by default
only topic ids no longer in the broker's log dirs are considered, and a topic id may be named to
remove exactly that one.

Absence is no proof: a topic id, found missing or named, is removed only on the controller's word
that Kafka deleted it (``runs.removal_evidence``: the cluster's metadata no longer has it); without
it the removal is refused unless forced (a broker being decommissioned, a cluster that is gone). A
removal already begun is resumed without asking again. A tombstone written in error can be lifted
(``lift_tombstone``): the topic id may then be copied to again.

On a cluster (``brokers:``) removal may run from any broker: a topic id another broker still
reports (its fresh replica observation, ``tier.replica.brokers_reporting``) is on the cluster, so
its data is live like a topic id in this broker's own log dirs; the refusal names the broker, and
only ``force`` removes it.

Each segment deletion is a RemoteDeleteRequest (an error when it fails), counted in the
partition's counters on no broker (``metrics.tally``).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from tiering_core.engine.lease import HeldPartition, held_partition
from tiering_core.engine.segment_ops import delete_remote_segment
from tiering_core.errors import InvalidTopicError, TieringError
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition, validate_topic_name
from tiering_core.metadata.errors import FencedError, LeaseHeldError, MetadataStoreError
from tiering_core.metadata.states import RemotePartitionDeleteState
from tiering_core.metrics import names
from tiering_core.metrics.tally import Tally, tallied
from tiering_core.runs.errors import DeletionUnprovenError, RemovalRefusedError, RemovalRequestRefusedError
from tiering_core.runs.orphans import delete_unreferenced_keys, unreferenced_object_keys
from tiering_core.runs.removal_evidence import broker_topic_ids, deletion_unproven, reported_topic_ids
from tiering_core.runs.removal_targets import RemovalTargets
from tiering_core.storage.partition_state import partition_state_key

if TYPE_CHECKING:
    from tiering_core.context import TieringContext
    from tiering_core.metadata.store import PartitionRecord, RemoteLogMetadataStore, TaskAttempt
    from tiering_core.storage.remote import RemoteStorage

log = logging.getLogger(__name__)

_FINISHED = RemotePartitionDeleteState.DELETE_PARTITION_FINISHED


@dataclass
class RemovalResult:
    """``topic_ids``: removed (or, in a dry run, to remove); ``kept_topic_ids``: left alone as
    still in the log dirs; ``orphan_objects``: keys under the prefix no metadata references,
    swept before DELETE_PARTITION_FINISHED (a dry run: would be)."""

    topic: str
    partition: int
    dry_run: bool = False
    fenced: bool = False
    topic_ids: list[str] = field(default_factory=list)
    kept_topic_ids: list[str] = field(default_factory=list)
    segments_deleted: int = 0
    bytes_deleted: int = 0
    state: str | None = None
    planned: list[dict[str, Any]] = field(default_factory=list)
    orphan_objects: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe, for ``--json`` and XCom."""
        return {**asdict(self), "seconds": round(self.seconds, 3)}


def removal_targets(ctx: TieringContext, tp: TopicPartition, topic_id: str | None = None) -> RemovalTargets:
    """What removing ``tp`` (optionally only its ``topic_id``) deletes, checked before anything is.

    Without ``topic_id``: every recorded, not yet dropped topic id of ``tp`` that is not in the
    broker's log dirs, plus any whose removal already began (resumed: its data is half gone and
    nothing can be copied to it). Refuses (RemovalRefusedError) when that leaves nothing while a
    topic id of ``tp`` is still in the log dirs, and (DeletionUnprovenError, carrying the targets
    a forced removal deletes) when a topic id missing from the log dirs has no positive evidence
    of its deletion (``deletion_unproven``). With
    ``topic_id``: exactly that one, which must be recorded for ``tp``, and whose deletion must be
    the controller's word too unless its removal already began (DeletionUnprovenError carrying it).
    Unknown partitions raise TieringError.
    """
    records = [r for r in ctx.metadata.list_partitions() if r.topic_partition == tp]
    if not records:
        raise TieringError(f"partition {tp} has no remote data to remove (unknown to the metadata store)")
    if topic_id is not None:
        named = [r for r in records if r.topic_id == topic_id]
        if not named:
            known = ", ".join(r.topic_id for r in records)
            raise TieringError(f"partition {tp} has no remote data under topic id {topic_id} (recorded: {known})")
        tip = TopicIdPartition(topic_id, tp)
        if named[0].dropped:
            return RemovalTargets(tp, (), (tip,), ())
        targets = RemovalTargets(tp, (tip,), (), ())
        unproven = deletion_unproven(ctx, tp, [topic_id]) if named[0].delete_state is None else None
        if unproven is not None:
            raise DeletionUnprovenError(unproven, targets=targets)
        return targets

    def tip_of(record: PartitionRecord) -> TopicIdPartition:
        return TopicIdPartition(record.topic_id, record.topic_partition)

    removed = tuple(tip_of(r) for r in records if r.dropped)
    live = [r for r in records if not r.dropped]
    resumed = [r for r in live if r.delete_state is not None]
    fresh = [r for r in live if r.delete_state is None]
    on_broker = broker_topic_ids(ctx, tp) if fresh else {}
    reported = reported_topic_ids(ctx, tp, [r.topic_id for r in fresh if r.topic_id not in on_broker])
    live_ids = on_broker.keys() | reported.keys()
    remove = tuple(tip_of(r) for r in resumed + [r for r in fresh if r.topic_id not in live_ids])
    kept = tuple(tip_of(r) for r in fresh if r.topic_id in live_ids)
    if not remove and kept:
        already = f" (already removed: topic id(s) {', '.join(t.topic_id for t in removed)})" if removed else ""
        targets = RemovalTargets(tp, (), removed, kept, reported)
        if not reported:
            where = "; ".join(f"topic id {t.topic_id} in {on_broker[t.topic_id]}" for t in kept)
            raise RemovalRefusedError(
                f"{tp} is still in the broker's log dirs ({where}): its remote data is live and is not removed"
                f"{already}. To remove it anyway (e.g. a broker being decommissioned), name the topic id: "
                f"--topic-id {kept[0].topic_id}, with --force while Kafka has not deleted it",
                targets=targets,
            )
        where = "; ".join(
            f"topic id {t.topic_id} "
            + (f"in {on_broker[t.topic_id]}" if t.topic_id in on_broker else f"reported by {reported[t.topic_id]}")
            for t in kept
        )
        raise RemovalRefusedError(
            f"{tp} is still on the cluster ({where}): its remote data is live and is not removed{already}. "
            "To remove it anyway, --force (force in the removal DAG) or name the topic id",
            targets=targets,
        )
    created = {r.topic_id: r.created_ms for r in records}
    ordered = sorted(remove, key=lambda t: (created[t.topic_id], t.topic_id))  # oldest first
    targets = RemovalTargets(tp, tuple(ordered), removed, kept, reported)
    gone = [r.topic_id for r in fresh if r.topic_id not in live_ids]
    unproven = deletion_unproven(ctx, tp, gone) if gone else None
    if unproven is not None:
        raise DeletionUnprovenError(unproven, targets=targets)
    return targets


def _targets(ctx: TieringContext, tp: TopicPartition, *, force: bool) -> RemovalTargets:
    """``removal_targets``; with ``force``, also those whose deletion is not proven and those
    another broker of the cluster still reports."""
    try:
        targets = removal_targets(ctx, tp)
    except DeletionUnprovenError as exc:
        if not force or exc.targets is None:
            raise
        log.warning("%s (forced: removed anyway)", exc)
        return exc.targets.forced()
    except RemovalRefusedError as exc:
        if not force or exc.targets is None or not exc.targets.reported:
            raise
        log.warning("%s (forced: removed anyway)", exc)
        return exc.targets.forced()
    if force and targets.reported:
        log.warning("%s: topic id(s) %s reported by other brokers: forced, removed anyway", tp, dict(targets.reported))
    return targets.forced() if force else targets


def plan_removal_request(
    ctx: TieringContext,
    topic: str,
    partitions: Sequence[int | str],
    *,
    confirm: str,
    dry_run: bool,
    force: bool,
) -> list[dict[str, Any]]:
    """The rules of a removal request (the Airflow removal DAG's): ``confirm`` must repeat the
    topic, every partition must have remote data, and neither live data (a topic id still in the
    log dirs) nor data of a topic id without the controller's word that it was deleted goes without
    ``force``. Per partition, the topic ids to delete (a dry run: to list) and ``force``, which the
    removal task passes on: it asks for the controller's word again when it deletes.

    A refusal raises ``RemovalRequestRefusedError``; a metadata store outage raises
    ``MetadataStoreError`` (transient: the caller retries).
    """
    if confirm != topic:
        raise RemovalRequestRefusedError(
            f"confirm must repeat the topic name {topic!r} (got {confirm!r}); nothing deleted"
        )
    try:
        validate_topic_name(topic)
    except InvalidTopicError as exc:
        raise RemovalRequestRefusedError(f"{exc}; nothing deleted") from exc
    plan: list[dict[str, Any]] = []
    unknown: list[str] = []
    live: dict[str, list[str]] = {}  # partitions whose only remote data is live
    for partition in sorted({int(p) for p in partitions}):
        tp = TopicPartition(topic, partition)
        try:
            targets = _targets(ctx, tp, force=force)
        except MetadataStoreError:
            raise  # transient: the caller retries
        except DeletionUnprovenError as exc:
            raise RemovalRequestRefusedError(str(exc)) from exc
        except RemovalRefusedError as exc:
            if exc.targets is None:  # a partition directory whose topic id cannot be read
                raise RemovalRequestRefusedError(f"{exc}; nothing deleted") from exc
            targets = exc.targets  # only live data: refused below unless force
        except TieringError as exc:
            log.info("%s", exc)
            unknown.append(str(tp))
            continue
        remove = [t.topic_id for t in targets.remove]
        held = [t.topic_id for t in targets.kept]
        if held and not remove:
            live[str(tp)] = [f"{t} reported by {targets.reported[t]}" if t in targets.reported else t for t in held]
        if held:
            verb = "deleted too (force)" if force else "kept"
            log.warning("%s: topic id(s) %s are still in the broker's log dirs: %s", tp, held, verb)
        # No explicit topic id left (every one already removed): the core reports it finished.
        topic_ids = remove + held if force else remove
        plan.append({"partition": partition, "topic_ids": topic_ids if topic_ids or held else None, "force": force})
    if unknown:
        raise RemovalRequestRefusedError(
            f"{topic}: partition(s) {', '.join(unknown)} have no remote data (unknown to the metadata store); "
            "nothing deleted"
        )
    if live and not force:
        which = "; ".join(f"{tp} (topic id {', '.join(ids)})" for tp, ids in live.items())
        on_cluster = any(" reported by broker " in t for ids in live.values() for t in ids)
        still = "on the cluster" if on_cluster else "in the broker's log dirs"
        refusal = (
            f"still {still}, so their remote data is live: {which}. Set force to delete it anyway "
            "(e.g. a broker being decommissioned)"
        )
        if not dry_run:
            raise RemovalRequestRefusedError(f"{refusal}; nothing deleted")
        log.warning("dry run: a real run would be refused: %s", refusal)
    mode = "dry run: listing" if dry_run else "deleting"
    log.info("%s the remote data of %s: %s", mode, topic, plan)
    return plan


def _sweep(store: RemoteLogMetadataStore, storage: RemoteStorage, tip: TopicIdPartition) -> list[str]:
    """Delete what no metadata references: objects, and unfinished uploads of any age (we hold
    the partition's lease, so no copy of ours is still writing: what remains was killed); then,
    last, the partition's state object (no orphan: not among the keys returned). A run killed
    before that finishes it when run again, which sweeps again before DELETE_PARTITION_FINISHED."""
    keys = unreferenced_object_keys(store, storage, tip)
    if keys:
        delete_unreferenced_keys(storage, keys)
        log.info("%s: deleted %d object(s) no metadata referenced", tip, len(keys))
    uploads = storage.remove_incomplete_uploads(tip, older_than_ms=1)
    if uploads:
        log.info("%s: removed %d unfinished upload(s)", tip, len(uploads))
    storage.delete_keys([partition_state_key(tip, storage.prefix)])
    return keys + [u.key for u in uploads]


def _named_targets(ctx: TieringContext, tp: TopicPartition, topic_ids: Sequence[str], *, force: bool) -> RemovalTargets:
    """``removal_targets`` of each named topic id, in the order given, as one (each must be recorded;
    with ``force``, also without the controller's word that it was deleted)."""

    def one(topic_id: str) -> RemovalTargets:
        try:
            return removal_targets(ctx, tp, topic_id)
        except DeletionUnprovenError as exc:
            if not force or exc.targets is None:
                raise
            log.warning("%s (forced: removed anyway)", exc)
            return exc.targets

    each = [one(topic_id) for topic_id in dict.fromkeys(topic_ids)]
    return RemovalTargets(
        tp,
        tuple(t for one in each for t in one.remove),
        tuple(t for one in each for t in one.removed),
        (),
    )


def delete_partition(
    ctx: TieringContext,
    tp: TopicPartition,
    *,
    topic_ids: Sequence[str] | None = None,
    topic_id: str | None = None,
    dry_run: bool = False,
    run_id: str | None = None,
    force: bool = False,
    attempt: TaskAttempt | None = None,
) -> RemovalResult:
    """Delete the remote data of a removed partition (see ``removal_targets``; ``force`` goes
    without the controller's word that it was deleted); resumable.

    ``topic_ids`` (or a single ``topic_id``) names exactly the topic ids to remove, each recorded
    for ``tp``, whether or not the broker still holds it, reported as one result; each needs the
    controller's word as well unless ``force``; an empty list removes nothing.
    A partition whose every target is already removed (a rerun after a run killed after the
    drop) reports DELETE_PARTITION_FINISHED and changes nothing.
    ``attempt`` names a scheduled task's try: a retry takes over its killed previous try's lease.
    """
    if topic_id is not None:
        if topic_ids is not None:
            raise ValueError("name the topic ids to remove either as topic_id or as topic_ids, not both")
        topic_ids = [topic_id]
    started = time.monotonic()
    store, storage = ctx.metadata, ctx.storage
    result = RemovalResult(topic=tp.topic, partition=tp.partition, dry_run=dry_run)
    targets = _targets(ctx, tp, force=force) if topic_ids is None else _named_targets(ctx, tp, topic_ids, force=force)
    result.kept_topic_ids = [t.topic_id for t in targets.kept]
    for tip in targets.kept:
        log.info("%s: topic id %s is in the broker's log dirs: its remote data is left alone", tp, tip.topic_id)
    if not targets.remove:
        result.topic_ids = [t.topic_id for t in targets.removed]
        if targets.removed:
            result.state = _FINISHED.value
            log.info("%s: already removed (topic id(s) %s)", tp, ", ".join(result.topic_ids))
        else:
            log.info("%s: no topic id named: nothing to remove", tp)
        result.seconds = time.monotonic() - started
        return result
    result.topic_ids = [t.topic_id for t in targets.remove]
    if dry_run:
        for tip in targets.remove:
            result.planned.extend(
                {
                    "topic_id": tip.topic_id,
                    "segment_id": str(s.segment_id),
                    "start_offset": s.start_offset,
                    "end_offset": s.end_offset,
                    "size_bytes": s.size_bytes,
                    "state": s.state.value,
                }
                for s in store.list_segments(tip)
            )
            result.orphan_objects.extend(unreferenced_object_keys(store, storage, tip))
            result.orphan_objects.extend(u.key for u in storage.incomplete_uploads(tip, older_than_ms=1))
        log.info(
            "%s: dry run: topic id(s) %s: %d remote segment(s) and %d unreferenced object(s) would be deleted",
            tp,
            ", ".join(result.topic_ids),
            len(result.planned),
            len(result.orphan_objects),
        )
        result.seconds = time.monotonic() - started
        return result

    run = run_id or uuid.uuid4().hex
    states: list[str] = []
    for tip in targets.remove:
        state = _remove_one(ctx, tip, run, result, attempt)
        if state is not None:
            states.append(state)
    if states and not result.fenced:
        result.state = _FINISHED.value
    elif states:
        result.state = states[-1]
    result.seconds = time.monotonic() - started
    return result


def _remove_one(
    ctx: TieringContext, tip: TopicIdPartition, run: str, result: RemovalResult, attempt: TaskAttempt | None
) -> str | None:
    """Section 7 for one topic id, from wherever an earlier run stopped; the state reached."""
    store, storage = ctx.metadata, ctx.storage
    storage.require_writable()
    state: RemotePartitionDeleteState | None = None
    try:
        with (
            held_partition(store, tip, holder=f"delete-partition:{run}", run_id=run, attempt=attempt) as held,
            tallied(store, tip, attempt=attempt) as tally,
        ):
            state = _remove_held(store, storage, held, result, tally)
    except LeaseHeldError as exc:
        log.warning("%s: another run holds the partition (%s); removal not started", tip, exc)
        result.fenced = True
        return None
    except _Stopped as stopped:
        state = stopped.state
        result.fenced = True
        log.warning("%s: fenced by a newer run; removal stopped (run it again to resume)", tip)
    return state.value if state is not None else None


class _Stopped(Exception):
    """Fenced while removing: carries the state reached."""

    def __init__(self, state: RemotePartitionDeleteState | None) -> None:
        super().__init__(state)
        self.state = state


def _remove_held(
    store: RemoteLogMetadataStore, storage: RemoteStorage, held: HeldPartition, result: RemovalResult, tally: Tally
) -> RemotePartitionDeleteState | None:
    tip = held.tip
    state: RemotePartitionDeleteState | None = None
    try:
        record = store.get_partition(tip)
        state = record.delete_state if record is not None else None
        if state is None:
            store.mark_partition_for_deletion(tip, held.require())
            state = RemotePartitionDeleteState.DELETE_PARTITION_MARKED
            log.info("%s: marked for deletion", tip)
        if state == RemotePartitionDeleteState.DELETE_PARTITION_MARKED:
            store.update_partition_delete_state(
                tip, RemotePartitionDeleteState.DELETE_PARTITION_STARTED, held.require()
            )
            state = RemotePartitionDeleteState.DELETE_PARTITION_STARTED
        if state == RemotePartitionDeleteState.DELETE_PARTITION_STARTED:
            for segment in store.list_segments(tip):
                with tally.request(names.REMOTE_DELETE_REQUESTS, names.REMOTE_DELETE_ERRORS):
                    delete_remote_segment(store, storage, segment, held.require())
                result.segments_deleted += 1
                result.bytes_deleted += segment.size_bytes
            result.orphan_objects.extend(_sweep(store, storage, tip))
            store.update_partition_delete_state(tip, _FINISHED, held.require())
            state = _FINISHED
        elif record is not None and not record.dropped:
            # Resumed at FINISHED: nothing was left then, but sweep again rather than trust it.
            result.orphan_objects.extend(_sweep(store, storage, tip))
        store.drop_partition_metadata(tip, held.require())
        log.info(
            "%s: remote partition deleted (%d segment(s), %d bytes)", tip, result.segments_deleted, result.bytes_deleted
        )
    except FencedError as exc:
        raise _Stopped(state) from exc
    return state


def lift_tombstone(ctx: TieringContext, tip: TopicIdPartition, *, run_id: str | None = None) -> None:
    """Lift the tombstone of a removal made in error: the topic id may be copied to again (from
    what the broker still holds; the removed remote data is gone). Only a finished removal's
    tombstone is lifted; a removal in progress is finished first."""
    run = run_id or uuid.uuid4().hex
    ctx.storage.require_writable()
    with held_partition(ctx.metadata, tip, holder=f"lift-tombstone:{run}", run_id=run) as held:
        ctx.metadata.lift_tombstone(tip, held.require())
    log.info("%s: tombstone lifted: the topic id may be tiered again", tip)
