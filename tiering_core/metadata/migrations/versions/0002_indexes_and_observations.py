"""Covering lookup indexes, a bounded segment_for scan, DeleteRecords observations, partition timestamps.

- ``tiering_epoch_highest.max_span`` (widest finished range per epoch, backfilled) bounds the
  range segment_for looks at; ``ix_segment_epochs_cover`` answers it from the index alone.
- Listing reads a partial index of not-yet-deleted segments in (start offset, event time) order
  that also holds the columns identifying each segment's content, so a listing whose segments
  were decoded before touches no table rows.
- DeleteRecords offsets move from one column to an observation table (offset, source, time,
  token, run); the column's value becomes one observation.
- Partitions get created/updated times (0 for rows older than this revision).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

LIVE = "state <> 'DELETE_SEGMENT_FINISHED'"


def upgrade() -> None:
    op.create_table(
        "tiering_delete_records",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("partition_id", sa.Integer(), sa.ForeignKey("tiering_partitions.id"), nullable=False),
        sa.Column("before_offset", sa.BigInteger(), nullable=False),
        sa.Column("source", sa.String(255), nullable=False),
        sa.Column("observed_ms", sa.BigInteger(), nullable=False),
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.Column("run_id", sa.String(255), nullable=True),
    )
    op.create_index("ix_delete_records_partition_offset", "tiering_delete_records", ["partition_id", "before_offset"])
    op.execute(
        "INSERT INTO tiering_delete_records (partition_id, before_offset, source, observed_ms, token, run_id) "
        "SELECT id, delete_records_offset, 'metadata schema 0001', 0, lease_token, NULL "
        "FROM tiering_partitions WHERE delete_records_offset IS NOT NULL"
    )
    with op.batch_alter_table("tiering_partitions") as batch:
        batch.drop_index("ix_tiering_partitions_topic")
        batch.drop_column("delete_records_offset")
        batch.add_column(sa.Column("created_ms", sa.BigInteger(), nullable=False, server_default=sa.text("0")))
        batch.add_column(sa.Column("updated_ms", sa.BigInteger(), nullable=False, server_default=sa.text("0")))
        batch.create_index("ix_partitions_topic_partition", ["topic", "partition"])

    op.drop_index("ix_segments_partition_state_start", table_name="tiering_segments")
    op.create_index("ix_segments_partition_start", "tiering_segments", ["partition_id", "start_offset"])
    op.create_index(
        "ix_segments_live",
        "tiering_segments",
        ["partition_id", "start_offset", "event_time", "segment_id", "state", "writer_token"],
        sqlite_where=sa.text(LIVE),
        postgresql_where=sa.text(LIVE),
    )

    op.drop_index("ix_segment_epochs_lookup", table_name="tiering_segment_epochs")
    op.create_index(
        "ix_segment_epochs_cover",
        "tiering_segment_epochs",
        ["partition_id", "epoch", "start_offset", "end_offset", "finish_seq"],
    )

    op.add_column(
        "tiering_epoch_highest",
        sa.Column("max_span", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
    )
    op.execute(
        "UPDATE tiering_epoch_highest SET max_span = COALESCE(("
        "SELECT MAX(e.end_offset - e.start_offset) FROM tiering_segment_epochs e "
        "WHERE e.partition_id = tiering_epoch_highest.partition_id AND e.epoch = tiering_epoch_highest.epoch"
        "), 0)"
    )


def downgrade() -> None:
    with op.batch_alter_table("tiering_epoch_highest") as batch:
        batch.drop_column("max_span")

    op.drop_index("ix_segment_epochs_cover", table_name="tiering_segment_epochs")
    op.create_index("ix_segment_epochs_lookup", "tiering_segment_epochs", ["partition_id", "epoch", "start_offset"])

    op.drop_index("ix_segments_live", table_name="tiering_segments")
    op.drop_index("ix_segments_partition_start", table_name="tiering_segments")
    op.create_index("ix_segments_partition_state_start", "tiering_segments", ["partition_id", "state", "start_offset"])

    with op.batch_alter_table("tiering_partitions") as batch:
        batch.drop_index("ix_partitions_topic_partition")
        batch.drop_column("updated_ms")
        batch.drop_column("created_ms")
        batch.add_column(sa.Column("delete_records_offset", sa.BigInteger(), nullable=True))
        batch.create_index("ix_tiering_partitions_topic", ["topic"])
    op.execute(
        "UPDATE tiering_partitions SET delete_records_offset = ("
        "SELECT MAX(d.before_offset) FROM tiering_delete_records d WHERE d.partition_id = tiering_partitions.id)"
    )
    op.drop_index("ix_delete_records_partition_offset", table_name="tiering_delete_records")
    op.drop_table("tiering_delete_records")
