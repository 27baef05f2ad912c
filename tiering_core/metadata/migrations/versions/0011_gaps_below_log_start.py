"""Tiering gaps below the global log start are history: the gaps a store recorded before are
trimmed at each partition's global log start (the larger of its remote log start offset and the
highest DeleteRecords applied through the platform), as the store now does whenever that moves.

No schema change. A gap wholly below the log start is removed, one it cuts through starts at it
(detected when it first was), one at or above it stays. The way back changes nothing: the offsets
trimmed were deleted on purpose, by retention or a DeleteRecords.

Revision ID: 0011_gaps_below_log_start
Revises: 0010_replays
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_gaps_below_log_start"
down_revision = "0010_replays"
branch_labels = None
depends_on = None

#: ``tiering_delete_records.source`` of a DeleteRecords applied through the platform (the only
#: rows that move the log start; older rows from a replica's files never count).
APPLIED = "tiering delete-records"


def upgrade() -> None:
    conn = op.get_bind()
    starts = conn.execute(
        sa.text(
            "SELECT p.id, p.remote_log_start_offset, "
            "(SELECT MAX(d.before_offset) FROM tiering_delete_records d "
            " WHERE d.partition_id = p.id AND d.source = :applied) "
            "FROM tiering_partitions p "
            "WHERE EXISTS (SELECT 1 FROM tiering_gaps g WHERE g.partition_id = p.id)"
        ),
        {"applied": APPLIED},
    ).all()
    for pid, remote_start, applied in starts:
        known = [int(o) for o in (remote_start, applied) if o is not None]
        if not known:
            continue
        params = {"pid": pid, "start": max(known)}
        across = conn.execute(
            sa.text(
                "SELECT end_offset, detected_ms FROM tiering_gaps "
                "WHERE partition_id = :pid AND start_offset < :start AND end_offset >= :start "
                "ORDER BY detected_ms, id"
            ),
            params,
        ).all()
        conn.execute(sa.text("DELETE FROM tiering_gaps WHERE partition_id = :pid AND start_offset < :start"), params)
        ends = {
            int(end)
            for (end,) in conn.execute(
                sa.text("SELECT end_offset FROM tiering_gaps WHERE partition_id = :pid AND start_offset = :start"),
                params,
            )
        }
        for end, detected in across:
            if int(end) in ends:
                continue
            ends.add(int(end))
            conn.execute(
                sa.text(
                    "INSERT INTO tiering_gaps (partition_id, start_offset, end_offset, detected_ms) "
                    "VALUES (:pid, :start, :end, :detected)"
                ),
                {**params, "end": end, "detected": detected},
            )


def downgrade() -> None:
    pass
