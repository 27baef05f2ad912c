"""Counters and lags for metrics.

- ``tiering_partition_counters``: one row per (topic id, partition, broker) of what runs did
  (copies, deletions, reads, index repairs, scrub failures), each count raised by the run that
  acted, with the database clock of the last finished copy and the last task that acted. Broker
  -1 holds what ran on no broker (reads, verify).
- The observation tables gain the copy lag, delete lag and remote size a run saw (nullable:
  rows written before, and runs that did not compute one, leave them empty).

No data moves: the counters start empty, the new columns NULL.

Revision ID: 0005_counters
Revises: 0004_observations
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_counters"
down_revision = "0004_observations"
branch_labels = None
depends_on = None

COUNTS = (
    "copy_bytes",
    "copy_requests",
    "copy_errors",
    "delete_requests",
    "delete_errors",
    "fetch_bytes",
    "fetch_requests",
    "fetch_errors",
    "index_repairs",
    "scrub_failures",
)
LAGS = (
    "copy_lag_bytes",
    "copy_lag_segments",
    "delete_lag_bytes",
    "delete_lag_segments",
    "remote_bytes",
    "remote_segments",
)
OBSERVATION_TABLES = ("tiering_replica_observations", "tiering_replica_observation_points")


def upgrade() -> None:
    op.create_table(
        "tiering_partition_counters",
        sa.Column("topic_id", sa.String(22), primary_key=True),
        sa.Column("partition", sa.Integer(), primary_key=True),
        sa.Column("broker_id", sa.Integer(), primary_key=True),
        sa.Column("topic", sa.String(249), nullable=False),
        *(sa.Column(name, sa.BigInteger(), nullable=False, server_default=sa.text("0")) for name in COUNTS),
        sa.Column("last_copy_ms", sa.BigInteger(), nullable=True),
        sa.Column("last_dag_id", sa.String(250), nullable=True),
        sa.Column("last_run_id", sa.String(250), nullable=True),
        sa.Column("last_task_id", sa.String(250), nullable=True),
        sa.Column("last_map_index", sa.Integer(), nullable=True),
        sa.Column("last_try_number", sa.Integer(), nullable=True),
        sa.Column("last_task_ms", sa.BigInteger(), nullable=True),
        sa.Column("updated_ms", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_partition_counters_topic", "tiering_partition_counters", ["topic"])
    for table in OBSERVATION_TABLES:
        with op.batch_alter_table(table) as batch:
            for name in LAGS:
                batch.add_column(sa.Column(name, sa.BigInteger(), nullable=True))


def downgrade() -> None:
    for table in OBSERVATION_TABLES:
        with op.batch_alter_table(table) as batch:
            for name in reversed(LAGS):
                batch.drop_column(name)
    op.drop_index("ix_partition_counters_topic", table_name="tiering_partition_counters")
    op.drop_table("tiering_partition_counters")
