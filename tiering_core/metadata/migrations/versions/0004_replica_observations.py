"""Replica observations (cluster mode): each broker's latest view of its replicas, and a
downsampled series of them for charts.

- ``tiering_replica_observations``: one row per (topic id, partition, broker), overwritten by each
  run; indexed by topic for a topic's cluster view.
- ``tiering_replica_observation_points``: per replica one point per resolution bucket, pruned
  past its resolution's horizon through ``ix_replica_observation_points_expiry``.

No data moves: both tables start empty and fill as runs observe their brokers.

Revision ID: 0004_observations
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_observations"
down_revision = "0003"
branch_labels = None
depends_on = None


def _observed() -> list[sa.Column[object]]:
    return [
        sa.Column("high_watermark", sa.BigInteger(), nullable=True),
        sa.Column("last_stable_offset", sa.BigInteger(), nullable=True),
        sa.Column("log_end_offset", sa.BigInteger(), nullable=False),
        sa.Column("local_log_start_offset", sa.BigInteger(), nullable=False),
        sa.Column("local_bytes", sa.BigInteger(), nullable=False),
        sa.Column("leader_epoch", sa.Integer(), nullable=True),
        sa.Column("leader_epoch_start_offset", sa.BigInteger(), nullable=True),
        sa.Column("at_risk", sa.Boolean(), nullable=False),
        sa.Column("headroom_seconds", sa.Float(), nullable=True),
        sa.Column("observed_ms", sa.BigInteger(), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "tiering_replica_observations",
        sa.Column("topic_id", sa.String(22), primary_key=True),
        sa.Column("partition", sa.Integer(), primary_key=True),
        sa.Column("broker_id", sa.Integer(), primary_key=True),
        sa.Column("topic", sa.String(249), nullable=False),
        *_observed(),
    )
    op.create_index("ix_replica_observations_topic", "tiering_replica_observations", ["topic"])
    op.create_table(
        "tiering_replica_observation_points",
        sa.Column("topic_id", sa.String(22), primary_key=True),
        sa.Column("partition", sa.Integer(), primary_key=True),
        sa.Column("broker_id", sa.Integer(), primary_key=True),
        sa.Column("resolution_ms", sa.Integer(), primary_key=True),
        sa.Column("bucket_ms", sa.BigInteger(), primary_key=True),
        *_observed(),
    )
    op.create_index(
        "ix_replica_observation_points_expiry", "tiering_replica_observation_points", ["resolution_ms", "bucket_ms"]
    )


def downgrade() -> None:
    op.drop_index("ix_replica_observation_points_expiry", table_name="tiering_replica_observation_points")
    op.drop_table("tiering_replica_observation_points")
    op.drop_index("ix_replica_observations_topic", table_name="tiering_replica_observations")
    op.drop_table("tiering_replica_observations")
