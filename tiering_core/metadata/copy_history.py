"""How many bytes the copies finished, over time: read from the append-only state history
(``tiering_state_history``), where every segment's COPY_SEGMENT_FINISHED is stamped with the
database clock when it committed, joined with the segment's size.

This is recorded history, not the current instant: the Tiering page's throughput and its copy
chart read it, so a chart shows every bucket in which copies finished, however seldom the brokers
were observed. A segment whose metadata the store has since dropped (a removed partition) no
longer counts.

The history only grows and has no index on time, but its ids grow with time (each change is stamped
with the database clock as it commits): a binary search over the primary key finds the first
change of the window in a few lookups, and the read scans only from there, so a page request costs
the window, not the store's whole past. The search starts ``ORDER_SLACK_MS`` early, for changes
whose transactions committed out of their clock's order.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Connection, bindparam, cast, func, literal_column, select

from tiering_core.metadata.queries import HI, P, S
from tiering_core.metadata.transactions import StoreCore

_FINISHED = HI.c.to_state == literal_column("'COPY_SEGMENT_FINISHED'")
#: How far out of their clock's order two committed changes may be (a transaction's length).
ORDER_SLACK_MS = 10 * 60_000
_BOUNDS = select(func.min(HI.c.id), func.max(HI.c.id))
_FIRST_FROM = (
    select(HI.c.id, HI.c.at_ms).where(HI.c.id >= bindparam("mid", type_=BigInteger)).order_by(HI.c.id).limit(1)
)


def first_change_from(conn: Connection, since_ms: int) -> int | None:
    """The id from which every change stamped at ``since_ms`` or later lies (None: the history is
    empty), by a binary search over the primary key (module docstring)."""
    low, high = conn.execute(_BOUNDS).one()
    if low is None:
        return None
    low, high = int(low), int(high) + 1  # the answer lies in [low, high]; high: past every change
    while low < high:
        mid = (low + high) // 2
        found_id, at_ms = conn.execute(_FIRST_FROM, {"mid": mid}).one()
        if at_ms >= since_ms:
            high = mid  # no change lies between mid and found_id
        else:
            low = int(found_id) + 1
    return low


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
            .where(
                HI.c.id >= bindparam("first", type_=BigInteger), _FINISHED, at >= bindparam("since", type_=BigInteger)
            )
            .group_by(bucket)
            .order_by(bucket)
        )
        params: dict[str, object] = {"bucket": bucket_ms, "since": since_ms}
        if topic is not None:
            query = query.join(P, P.c.id == HI.c.partition_id).where(P.c.topic == bindparam("topic"))
            params["topic"] = topic
        with self._read() as conn:
            first = first_change_from(conn, since_ms - ORDER_SLACK_MS)
            if first is None:
                return []
            rows = conn.execute(query, {**params, "first": first}).all()
        return [(int(at_ms), int(size)) for at_ms, size in rows]
