"""What a replay reads: a transaction whose marker was never tiered is decided by the broker's log
while it is there; read from the tier alone (a deleted topic) its records are a reported gap, never
replayed as if committed."""

from __future__ import annotations

import shutil

from tests.engine_support import TieringEnv, tip_of
from tests.read.test_isolation import build, consumer_view
from tiering_core.kafka.isolation import IsolationLevel
from tiering_core.read.reader import open_reader, open_remote_reader
from tiering_core.replay.source import GAP_UNDECIDED, RangeRequest, resolve_range
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
