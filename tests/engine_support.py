"""A tiering environment for engine tests: a real log dir, metadata DB and S3 (or filesystem) tier;
how every test waits for something to happen (``wait_until``) or for a lease to lapse
(``expire_lease``) on a machine that may be busy; what every copy's manifest must say of its
segment (``assert_manifest_holds_the_segment``) and the partition's state object of the store
(``assert_partition_state_published``); how often a run builds each partition's tier view
(``counted_view_builds``); the config a cluster's worker without a broker disk reads
(``serving_no_broker``); a new leader whose copy tiers a segment overlapping the old leader's
(``old_leader_copies``, ``new_leader_copies``)."""

from __future__ import annotations

import collections
import itertools
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tiering_core.config import PlatformConfig, load_config
from tiering_core.context import TieringContext
from tiering_core.engine.partition_state import partition_state
from tiering_core.kafka.checkpoints import parse_leader_epoch_checkpoint
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.metadata_log_writer import ClusterMetadataWriter
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.metadata.errors import FencedError
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.metadata.store import RemoteLogMetadataStore, RemoteLogSegmentMetadata
from tiering_core.runs.copy import run_copy
from tiering_core.storage.layout import ObjectKind
from tiering_core.storage.objects import RemoteObject
from tiering_core.storage.partition_state import PartitionState, partition_state_key
from tiering_core.storage.segment_facts import SegmentFacts

_clock = itertools.count(1_700_000_000_000, 11)


@dataclass
class TieringEnv:
    root: Path
    log_dir: Path
    config_path: Path
    remote: dict[str, Any]
    metadata_url: str
    topics: dict[str, Any] = field(default_factory=dict)
    #: Further top-level sections of the config (``kafka``, ``replay``, ...).
    sections: dict[str, Any] = field(default_factory=dict)

    def write_config(self, **topics: Any) -> PlatformConfig:
        self.topics.update(topics)
        doc = {
            "log_dirs": [str(self.log_dir)],
            "metadata": {"url": self.metadata_url, "lease_ms": 30_000},
            "remote": self.remote,
            "topics": {"*": {"retention.ms": -1, "retention.bytes": -1}, **self.topics},
            **self.sections,
        }
        self.config_path.write_text(yaml.safe_dump(doc))
        return load_config(self.config_path)

    @contextmanager
    def context(self) -> Iterator[TieringContext]:
        with TieringContext.open(load_config(self.config_path)) as ctx:
            yield ctx

    def writer(self, topic: str = "orders", partition: int = 0, **kwargs: Any) -> PartitionWriter:
        kwargs.setdefault("clock", lambda: next(_clock))
        kwargs.setdefault("segment_bytes", 10**9)
        return PartitionWriter(self.log_dir, TopicPartition(topic, partition), **kwargs)


def serving_no_broker(config: Path, root: Path) -> Path:
    """``config`` as a cluster's default-queue worker reads it (``serves_no_broker``): its log dirs
    broker 1's, a broker 2 beside it, and no broker chosen, so no log dir is read. Written to
    ``root/cluster.yaml``; the caller clears ``TIERING_BROKER_ID``."""
    doc = yaml.safe_load(config.read_text())
    doc["brokers"] = {1: {"log_dirs": doc.pop("log_dirs")}, 2: {"log_dirs": [str(root / "broker-2")]}}
    path = root / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def tip_of(writer: PartitionWriter) -> TopicIdPartition:
    return TopicIdPartition(writer.topic_id, writer.tp)


def kafka_creates_topic(writer: PartitionWriter) -> ClusterMetadataWriter:
    """The controller's records of the writer's topic (TopicRecord and PartitionRecords) in the
    metadata log of the writer's log dir, unless there already; the controller, to write on."""
    controller = ClusterMetadataWriter(writer.log_dir, clock=lambda: next(_clock))
    if writer.topic_id not in controller.topics:
        controller.create_topic(writer.tp.topic, writer.tp.partition + 1, topic_id=writer.topic_id)
    return controller


def kafka_deletes_topic(writer: PartitionWriter, *, committed: bool = True, rename: bool = True) -> None:
    """Kafka deletes the writer's topic: the controller's RemoveTopicRecord in the metadata log of
    the writer's log dir (``committed``: a snapshot after it proves it committed), then the broker
    renames the partition directory ``<topic>-<partition>.<uuid>-delete`` (``rename``)."""
    controller = kafka_creates_topic(writer)
    controller.remove_topic(writer.topic_id)
    if committed:
        controller.snapshot()
    if rename:
        writer.delete()


def write_segments(writer: PartitionWriter, count: int, records: int = 5) -> list[int]:
    """Append ``count`` full segments of ``records`` records each (rolled), return their bases."""
    bases = []
    for _ in range(count):
        bases.append(writer.next_offset)
        writer.append_records(records, value_size=50)
        writer.roll()
    return bases


def offset_records(first: int, count: int) -> list[tuple[bytes, bytes]]:
    """Records whose key and value name their offset: every replica appends the same ones."""
    return [(f"k{o}".encode(), f"v{o}".encode()) for o in range(first, first + count)]


def old_leader_copies(env: TieringEnv, *, epoch_0_ms: int | None = None) -> PartitionWriter:
    """The old leader's segments 0-4 and 5-9 of epoch 0 (stamped ``epoch_0_ms``), closed and tiered."""
    old = env.writer()
    old.append(offset_records(0, 5), timestamp=epoch_0_ms)
    old.roll()
    old.append(offset_records(5, 5), timestamp=epoch_0_ms)
    old.roll()
    old.set_high_watermark()
    with env.context() as ctx:
        run_copy(ctx, old.tp)
    return old


def new_leader_copies(
    env: TieringEnv, old: PartitionWriter, *, epoch_0_ms: int | None = None, epoch_1_ms: int | None = None
) -> PartitionWriter:
    """The replica that becomes leader in epoch 1 at offset 10 replaces the old one's directory:
    it rolled at 7, so its segment 7-14 holds the end of epoch 0 and the start of epoch 1. Its copy
    resumes at 10 and tiers 7-14 whole: the tier holds 7-9 twice, in segments of the lineage."""
    shutil.rmtree(old.path)
    new = env.writer(topic_id=old.topic_id)
    new.append(offset_records(0, 7), timestamp=epoch_0_ms)
    new.roll()
    new.append(offset_records(7, 3), timestamp=epoch_0_ms)
    new.become_leader(1)
    new.append(offset_records(10, 5), timestamp=epoch_1_ms)
    new.roll()
    new.set_high_watermark()
    with env.context() as ctx:
        run_copy(ctx, new.tp)
        finished = sorted(
            (s.start_offset, s.end_offset)
            for s in ctx.metadata.list_segments(tip_of(new))
            if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        )
    assert finished == [(0, 4), (5, 9), (7, 14)], finished
    return new


@contextmanager
def traced_statements(engine: Any) -> Iterator[list[str]]:
    """Every statement SQLite runs on the engine's connections while held (the pool is emptied
    so that each connection from now on is traced): to show a read is set-wise."""
    from sqlalchemy import event

    statements: list[str] = []

    def traced(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.set_trace_callback(statements.append)

    event.listen(engine, "connect", traced)
    engine.dispose()
    try:
        yield statements
    finally:
        event.remove(engine, "connect", traced)
        engine.dispose()


@contextmanager
def counted_view_builds() -> Iterator[collections.Counter[Path]]:
    """How many times each partition directory's tier view is built while held (every builder,
    ``tier_view`` included, goes through ``load_tier_view``), by the directory's path."""
    from tiering_core.tier import view

    builds: collections.Counter[Path] = collections.Counter()
    original = view.load_tier_view

    def counted(log: Any, store: Any, live: Any = None, stored: Any = None) -> Any:
        builds[log.path] += 1
        return original(log, store, live, stored)

    view.load_tier_view = counted  # type: ignore[assignment]
    try:
        yield builds
    finally:
        view.load_tier_view = original


def wait_until(condition: Callable[[], object], *, what: str = "the condition", timeout: float = 60.0) -> None:
    """Until ``condition()`` is true: how a test waits for another thread or process to get
    somewhere, instead of sleeping a guess. The deadline is generous (a busy machine is slow, not
    wrong) and only a failing test ever reaches it."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.02)


def expire_lease(store: RemoteLogMetadataStore, tip: TopicIdPartition) -> None:
    """Make the partition's lease lapse now, as a killed or stalled holder's would: its time to
    live is cut to 1 ms on the store's own clock (again, should its holder renew meanwhile).
    Runs in tests hold leases long enough for a busy machine; where a lease must lapse, the
    test says when."""

    def lapsed() -> bool:
        lease = store.current_lease(tip)
        if lease is None:
            return True
        try:
            store.renew_lease(lease, ttl_ms=1)
        except FencedError:  # it lapsed, or was released or taken, meanwhile: look again
            pass
        return False

    wait_until(lapsed, what=f"the lease of {tip} to lapse")


def select_count(statements: list[str]) -> int:
    return sum(1 for s in statements if s.lstrip().upper().startswith("SELECT"))


def assert_manifest_holds_the_segment(ctx: TieringContext, segment: RemoteLogSegmentMetadata) -> SegmentFacts:
    """The segment's manifest (the one whose digest the store recorded) carries the store's row of
    it, and as its epoch index what its ``leader-epoch-checkpoint`` object holds; its facts."""
    from tiering_core.engine.segment_ops import segment_ref

    ref = segment_ref(segment)
    assert ref.manifest_sha256 is not None
    manifest = ctx.storage.read_manifest(ref)
    assert manifest is not None and manifest.segment is not None
    facts = manifest.segment
    assert (facts.end_offset, facts.max_timestamp) == (segment.end_offset, segment.max_timestamp)
    assert {e.epoch: e.start_offset for e in facts.leader_epochs} == segment.leader_epochs
    assert [e.epoch for e in facts.leader_epochs] == sorted(segment.leader_epochs)
    checkpoint = ctx.storage.fetch(ref, ObjectKind.LEADER_EPOCH_CHECKPOINT).decode()
    assert list(facts.epoch_index) == parse_leader_epoch_checkpoint(checkpoint, Path("remote")) != []
    assert manifest.objects[ObjectKind.LOG].size == segment.size_bytes
    return facts


def segment_objects(ctx: TieringContext, tip: TopicIdPartition) -> list[RemoteObject]:
    """The objects under the partition's prefix but its ``partition-state.json``: what its
    segments (and orphans, if any) leave."""
    state = partition_state_key(tip, ctx.storage.prefix)
    return [o for o in ctx.storage.list_objects(tip) if o.key != state]


def assert_partition_state_published(ctx: TieringContext, tip: TopicIdPartition) -> PartitionState:
    """The partition's ``partition-state.json`` holds what the store holds of it now."""
    state = ctx.storage.read_partition_state(tip)
    assert state is not None, f"{tip}: no partition-state.json"
    assert state == partition_state(ctx.metadata, tip)
    assert state.updated_at_ms > 0
    return state
