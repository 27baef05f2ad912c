"""SQLite: a listing reads the partial index of live segments alone.

``ix_segments_live`` held the listing order and the columns identifying a segment's content; a
listing still read every segment's table row for the rest, one page per segment in a file where
many partitions' segments interleave. ``ix_segments_listing`` also holds the offsets, size and
leader epochs, so a listing (custom metadata aside, read when first asked for) touches no table
row. PostgreSQL keeps ``ix_segments_live``: its btree entries cannot hold unbounded leader epochs.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

LIVE = "state <> 'DELETE_SEGMENT_FINISHED'"
ORDER = ["partition_id", "start_offset", "event_time", "segment_id"]
LISTING = [*ORDER, "state", "writer_token", "end_offset", "max_timestamp", "size_bytes", "leader_epochs"]


def _sqlite() -> bool:
    return op.get_bind().dialect.name == "sqlite"


def upgrade() -> None:
    if not _sqlite():
        return
    op.drop_index("ix_segments_live", table_name="tiering_segments")
    op.create_index("ix_segments_listing", "tiering_segments", LISTING, sqlite_where=sa.text(LIVE))


def downgrade() -> None:
    if not _sqlite():
        return
    op.drop_index("ix_segments_listing", table_name="tiering_segments")
    op.create_index(
        "ix_segments_live", "tiering_segments", [*ORDER, "state", "writer_token"], sqlite_where=sa.text(LIVE)
    )
