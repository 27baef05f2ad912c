"""Initial schema: partitions, segments, per-epoch ranges, lineage, gaps, state history.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tiering_partitions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("topic_id", sa.String(22), nullable=False),
        sa.Column("topic", sa.String(249), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("delete_state", sa.String(32), nullable=True),
        sa.Column("dropped", sa.Boolean(), nullable=False),
        sa.Column("lease_holder", sa.String(255), nullable=True),
        sa.Column("lease_token", sa.BigInteger(), nullable=False),
        sa.Column("lease_expires_ms", sa.BigInteger(), nullable=False),
        sa.Column("fencing_counter", sa.BigInteger(), nullable=False),
        sa.Column("remote_log_start_offset", sa.BigInteger(), nullable=True),
        sa.Column("delete_records_offset", sa.BigInteger(), nullable=True),
        sa.Column("finish_counter", sa.BigInteger(), nullable=False),
        sa.UniqueConstraint("topic_id", "partition", name="uq_partition_topic_id"),
    )
    op.create_index("ix_tiering_partitions_topic", "tiering_partitions", ["topic"])
    op.create_table(
        "tiering_segments",
        sa.Column("segment_id", sa.String(36), primary_key=True),
        sa.Column("partition_id", sa.Integer(), sa.ForeignKey("tiering_partitions.id"), nullable=False),
        sa.Column("start_offset", sa.BigInteger(), nullable=False),
        sa.Column("end_offset", sa.BigInteger(), nullable=False),
        sa.Column("max_timestamp", sa.BigInteger(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("leader_epochs", sa.JSON(), nullable=False),
        sa.Column("writer_token", sa.BigInteger(), nullable=False),
        sa.Column("event_time", sa.BigInteger(), nullable=False),
        sa.Column("finish_seq", sa.BigInteger(), nullable=True),
        sa.Column("custom_metadata", sa.JSON(), nullable=False),
    )
    op.create_index("ix_segments_partition_state_start", "tiering_segments", ["partition_id", "state", "start_offset"])
    op.create_table(
        "tiering_segment_epochs",
        sa.Column("segment_id", sa.String(36), sa.ForeignKey("tiering_segments.segment_id"), primary_key=True),
        sa.Column("epoch", sa.Integer(), primary_key=True),
        sa.Column("partition_id", sa.Integer(), nullable=False),
        sa.Column("start_offset", sa.BigInteger(), nullable=False),
        sa.Column("end_offset", sa.BigInteger(), nullable=False),
        sa.Column("finish_seq", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_segment_epochs_lookup", "tiering_segment_epochs", ["partition_id", "epoch", "start_offset"])
    op.create_table(
        "tiering_epoch_highest",
        sa.Column("partition_id", sa.Integer(), sa.ForeignKey("tiering_partitions.id"), primary_key=True),
        sa.Column("epoch", sa.Integer(), primary_key=True),
        sa.Column("highest_offset", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "tiering_lineage",
        sa.Column("partition_id", sa.Integer(), sa.ForeignKey("tiering_partitions.id"), primary_key=True),
        sa.Column("epoch", sa.Integer(), primary_key=True),
        sa.Column("start_offset", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "tiering_gaps",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("partition_id", sa.Integer(), sa.ForeignKey("tiering_partitions.id"), nullable=False),
        sa.Column("start_offset", sa.BigInteger(), nullable=False),
        sa.Column("end_offset", sa.BigInteger(), nullable=False),
        sa.Column("detected_ms", sa.BigInteger(), nullable=False),
        sa.UniqueConstraint("partition_id", "start_offset", "end_offset", name="uq_gap_range"),
    )
    op.create_index("ix_tiering_gaps_partition_id", "tiering_gaps", ["partition_id"])
    op.create_table(
        "tiering_state_history",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("partition_id", sa.Integer(), nullable=False),
        sa.Column("segment_id", sa.String(36), nullable=True),
        sa.Column("from_state", sa.String(32), nullable=True),
        sa.Column("to_state", sa.String(32), nullable=False),
        sa.Column("at_ms", sa.BigInteger(), nullable=False),
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.Column("run_id", sa.String(255), nullable=True),
    )
    op.create_index("ix_tiering_state_history_partition_id", "tiering_state_history", ["partition_id"])
    op.create_index("ix_tiering_state_history_segment_id", "tiering_state_history", ["segment_id"])


def downgrade() -> None:
    for table in (
        "tiering_state_history",
        "tiering_gaps",
        "tiering_lineage",
        "tiering_epoch_highest",
        "tiering_segment_epochs",
        "tiering_segments",
        "tiering_partitions",
    ):
        op.drop_table(table)
