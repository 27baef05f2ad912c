"""What a replay reads: a transaction whose marker was never tiered is decided by the broker's log
while it is there; read from the tier alone (a deleted topic) its records are a reported gap, never
replayed as if committed. Where the process serves no broker, the source is what the metadata store
holds, read from the tier alone."""

from __future__ import annotations

import shutil

import pytest

from tests.engine_support import TieringEnv, serving_no_broker, tip_of, write_segments
from tests.read.test_isolation import build, consumer_view
from tiering_core.config import load_config
from tiering_core.context import TieringContext
from tiering_core.errors import TieringError
from tiering_core.kafka.isolation import IsolationLevel
from tiering_core.read.reader import open_reader, open_remote_reader
from tiering_core.replay.source import (
    GAP_UNDECIDED,
    RangeRequest,
    open_source,
    resolve_range,
    source_partitions,
    source_topic_id,
)
from tiering_core.runs.copy import run_copy


def test_a_transaction_open_at_the_end_of_the_tier_is_a_gap_once_the_broker_log_is_gone(
    tiering_env: TieringEnv,
) -> None:
    w = build(tiering_env)  # producer 9's aborted transaction: its marker in the active segment
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        joined = open_reader(ctx, w.tp)
        assert joined.first_undecided_offset() is None  # the broker's .txnindex decides it
        whole = resolve_range(joined, RangeRequest(from_offset=0), [])
        assert whole.gaps == () and whole.last == joined.highest_offset
        want = [r.offset for r in consumer_view(w, True) if r.offset <= joined.highest_offset]
        assert [r.offset for r in joined.read(0, 1000, IsolationLevel.READ_COMMITTED)] == want

        first_of_9 = min(r.offset for r in consumer_view(w, False) if r.key == b"abort9-0")
        shutil.rmtree(w.path)  # the topic deleted: the tier alone is left
        alone = open_remote_reader(ctx, tip_of(w))
        assert alone.first_undecided_offset() == first_of_9
        span = resolve_range(alone, RangeRequest(from_offset=0), [])
        assert span.last == first_of_9 - 1
        assert [(g.start, g.end, why) for g, why in span.gaps] == [(first_of_9, alone.highest_offset, GAP_UNDECIDED)]
        replayed = [r.offset for r in alone.read(0, 1000, IsolationLevel.READ_COMMITTED) if r.offset <= span.last]
        assert replayed == [o for o in want if o < first_of_9]
        # read_uncommitted takes every record as it is: nothing to decide.
        assert resolve_range(alone, RangeRequest(from_offset=0), [], IsolationLevel.READ_UNCOMMITTED).gaps == ()


def test_serving_no_broker_the_source_is_what_the_metadata_store_holds_read_from_the_tier(
    fs_env: TieringEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster's default-queue worker, without the broker's disk: the topic id and partitions come
    from the store, each read from the tier alone; a partition it holds nothing of is named."""
    monkeypatch.delenv("TIERING_BROKER_ID", raising=False)
    first = fs_env.writer("orders", 0)
    writers = [first, fs_env.writer("orders", 1, topic_id=first.topic_id)]  # one topic, one topic id
    with fs_env.context() as ctx:
        for w in writers:
            write_segments(w, 2)
            w.set_high_watermark()
            run_copy(ctx, w.tp)
        ends = {w.tp.partition: max(s.end_offset for s in ctx.metadata.list_segments(tip_of(w))) for w in writers}
    cluster = serving_no_broker(fs_env.config_path, fs_env.root)
    shutil.rmtree(fs_env.log_dir)  # no broker disk on this host
    with TieringContext.open(load_config(cluster)) as ctx:
        assert ctx.config.serves_no_broker
        topic_id = source_topic_id(ctx, "orders")
        tips = source_partitions(ctx, "orders", topic_id)
        assert tips == [tip_of(w) for w in writers]
        for tip in tips:
            records = open_source(ctx, tip).read(0, 1000, IsolationLevel.READ_COMMITTED)
            assert [r.offset for r in records] == list(range(ends[tip.partition] + 1))
        with pytest.raises(TieringError, match=r"has no remote data of partition\(s\) 7; it has 0, 1$"):
            source_partitions(ctx, "orders", topic_id, [1, 7])
