"""Bytes copied per time bucket, from the state history on SQLite and PostgreSQL: each finished
copy in the bucket of its commit, a topic's own only when asked, nothing before ``since``."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event, insert, select, update

from tests.engine_support import TieringEnv, write_segments
from tiering_core.metadata.copy_history import first_change_from
from tiering_core.metadata.queries import HI, P, S
from tiering_core.runs.copy import run_copy

MINUTE_MS = 60_000


def test_bytes_copied_fall_in_the_bucket_of_their_commit(tiering_env: TieringEnv) -> None:
    orders, clicks = tiering_env.writer("orders", 0), tiering_env.writer("clicks", 0)
    for w, count in ((orders, 2), (clicks, 1)):
        write_segments(w, count)
        w.append_records(1)
        w.set_high_watermark()
    with tiering_env.context() as ctx:
        run_copy(ctx, orders.tp, broker_id=1)
        run_copy(ctx, clicks.tp, broker_id=1)
        store = ctx.metadata
        with store.engine.begin() as conn:
            sizes = dict(conn.execute(select(S.c.segment_id, S.c.size_bytes)).all())
            of_clicks = select(S.c.segment_id).join(P, P.c.id == S.c.partition_id).where(P.c.topic == "clicks")
            (clicks_id,) = conn.execute(of_clicks).scalars()
            conn.execute(update(HI).where(HI.c.segment_id == clicks_id).values(at_ms=HI.c.at_ms - 30 * MINUTE_MS))
        now = store.database_now_ms()
        every = store.copied_bytes_series(since_ms=now - 60 * MINUTE_MS, bucket_ms=10 * MINUTE_MS)
        assert sum(size for _, size in every) == sum(sizes.values())
        assert [at for at, _ in every] == sorted(at for at, _ in every) and len(every) == 2
        assert all(at % (10 * MINUTE_MS) == 0 for at, _ in every)
        assert every[0] == (every[0][0], sizes[clicks_id])  # the older copy, thirty minutes back
        of_orders = store.copied_bytes_series(since_ms=now - 60 * MINUTE_MS, bucket_ms=10 * MINUTE_MS, topic="orders")
        assert of_orders == every[1:]
        assert store.copied_bytes_series(since_ms=now - 10 * MINUTE_MS, bucket_ms=MINUTE_MS, topic="clicks") == []
        with pytest.raises(ValueError, match="positive"):
            store.copied_bytes_series(since_ms=0, bucket_ms=0)


def test_the_window_s_first_change_is_found_by_a_few_primary_key_lookups(tiering_env: TieringEnv) -> None:
    with tiering_env.context() as ctx:
        engine = ctx.metadata.engine
        with engine.begin() as conn:
            assert first_change_from(conn, 0) is None  # an empty history
            rows = [
                {"partition_id": 1, "to_state": "COPY_SEGMENT_STARTED", "at_ms": i * 1000, "token": 1}
                for i in range(1000)
            ]
            conn.execute(insert(HI), rows)
            ids = list(conn.execute(select(HI.c.id).order_by(HI.c.id)).scalars())
        statements: list[str] = []

        def traced(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            statements.append(statement)

        event.listen(engine, "before_cursor_execute", traced)
        try:
            with engine.connect() as conn:
                assert first_change_from(conn, 500_500) == ids[501]  # the first stamped at or after it
                assert first_change_from(conn, 0) == ids[0] and first_change_from(conn, 10**9) == ids[-1] + 1
        finally:
            event.remove(engine, "before_cursor_execute", traced)
        assert 0 < len(statements) <= 3 * (1 + 11)  # per search: the bounds, then log2(1000) lookups
