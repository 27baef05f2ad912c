"""How many bytes the copies finished, over time: read from the append-only state history
(``tiering_state_history``), where every segment's COPY_SEGMENT_FINISHED is stamped with the
database clock when it committed, joined with the segment's size.

This is recorded history, not the current instant: the Tiering page's throughput and its copy
chart read it, so a chart shows every bucket in which copies finished, however seldom the brokers
were observed. A segment whose metadata the store has since dropped (a removed partition) no
longer counts.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, bindparam, cast, func, literal_column, select

from tiering_core.metadata.queries import HI, P, S
from tiering_core.metadata.transactions import StoreCore

_FINISHED = HI.c.to_state == literal_column("'COPY_SEGMENT_FINISHED'")


class CopyHistoryStore(StoreCore):
    """Bytes copied per time bucket (module docstring)."""

    def copied_bytes_series(self, *, since_ms: int, bucket_ms: int, topic: str | None = None) -> list[tuple[int, int]]:
        """(bucket start ms, bytes of the segments whose copy finished in it) from ``since_ms`` on,
        in time order, buckets without a finished copy left out; ``topic``: only its partitions."""
        if bucket_ms <= 0:
            raise ValueError(f"bucket_ms must be positive, not {bucket_ms}")
        at = HI.c.at_ms
        bucket = (at - at % bindparam("bucket", type_=BigInteger)).label("bucket")
        query = (
            select(bucket, cast(func.sum(S.c.size_bytes), BigInteger))
            .select_from(HI.join(S, S.c.segment_id == HI.c.segment_id))
            .where(_FINISHED, at >= bindparam("since", type_=BigInteger))
            .group_by(bucket)
            .order_by(bucket)
        )
        params: dict[str, object] = {"bucket": bucket_ms, "since": since_ms}
        if topic is not None:
            query = query.join(P, P.c.id == HI.c.partition_id).where(P.c.topic == bindparam("topic"))
            params["topic"] = topic
        with self._read() as conn:
            rows = conn.execute(query, params).all()
        return [(int(at_ms), int(size)) for at_ms, size in rows]
