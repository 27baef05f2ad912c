"""KIP-1257's retention percents in the observations.

The observation tables gain ``retention_size_percent`` and ``local_retention_size_percent``: a
partition's size in whole percents of ``retention.bytes`` and its local log's of
``local.retention.bytes``, as the run that observed the replica computed them (nullable: rows
written before, and limits not known, leave them empty).

No data moves: the new columns start NULL.

Revision ID: 0009_retention_percent
Revises: 0008_quota_holders
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_retention_percent"
down_revision = "0008_quota_holders"
branch_labels = None
depends_on = None

PERCENTS = ("retention_size_percent", "local_retention_size_percent")
OBSERVATION_TABLES = ("tiering_replica_observations", "tiering_replica_observation_points")


def upgrade() -> None:
    for table in OBSERVATION_TABLES:
        with op.batch_alter_table(table) as batch:
            for name in PERCENTS:
                batch.add_column(sa.Column(name, sa.BigInteger(), nullable=True))


def downgrade() -> None:
    for table in OBSERVATION_TABLES:
        with op.batch_alter_table(table) as batch:
            for name in reversed(PERCENTS):
                batch.drop_column(name)
