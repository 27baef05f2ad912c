"""The replays of the remote tier into Kafka topics (``tiering_replays``): each source partition's
replay recorded as it ended, the newest ``KEPT_REPLAYS`` kept, for the Tiering page. A record, not
progress: a replay finds where it stopped from the target's own records (docs/replay.md)."""

from __future__ import annotations

import json

from sqlalchemy import Table, delete, func, insert, select

from tiering_core.metadata.models import ReplayRow
from tiering_core.metadata.transactions import StoreCore
from tiering_core.metadata.values import ReplayRecord

_replays = ReplayRow.__table__
assert isinstance(_replays, Table)
REPLAYS: Table = _replays

#: Rows kept: older ones go as new ones come.
KEPT_REPLAYS = 500


class ReplayStore(StoreCore):
    """Recording replays and reading the newest back (module docstring)."""

    def record_replay(self, record: ReplayRecord) -> None:
        """Add ``record``; drop what falls beyond the newest ``KEPT_REPLAYS``."""
        values = {
            "topic": record.topic,
            "topic_id": record.topic_id,
            "partition": record.partition,
            "target_topic": record.target_topic,
            "first_offset": record.first_offset,
            "last_offset": record.last_offset,
            "resumed_after": record.resumed_after,
            "records": record.records,
            "bytes": record.bytes,
            "outcome": record.outcome,
            "detail": record.detail,
            "gaps": json.dumps([list(g) for g in record.gaps]),
            "run": record.run,
            "started_ms": record.started_ms,
            "finished_ms": record.finished_ms,
        }
        with self._write() as conn:
            conn.execute(insert(REPLAYS), values)
            newest = select(REPLAYS.c.id).order_by(REPLAYS.c.id.desc()).offset(KEPT_REPLAYS).limit(1)
            cutoff = conn.execute(newest).scalar()
            if cutoff is not None:
                conn.execute(delete(REPLAYS).where(REPLAYS.c.id <= cutoff))

    def recent_replays(self, limit: int = 20) -> list[ReplayRecord]:
        """The newest ``limit`` replays, newest first."""
        r = REPLAYS.c
        query = select(REPLAYS).order_by(r.finished_ms.desc(), r.id.desc()).limit(limit)
        with self._read() as conn:
            rows = conn.execute(query).all()
        return [
            ReplayRecord(
                row.topic,
                row.topic_id,
                row.partition,
                row.target_topic,
                row.first_offset,
                row.last_offset,
                row.resumed_after,
                row.records,
                row.bytes,
                row.outcome,
                row.detail,
                tuple((int(g[0]), int(g[1]), str(g[2])) for g in json.loads(row.gaps)),
                row.started_ms,
                row.finished_ms,
                row.run,
            )
            for row in rows
        ]

    def replay_count(self) -> int:
        with self._read() as conn:
            return int(conn.execute(select(func.count()).select_from(REPLAYS)).scalar() or 0)
