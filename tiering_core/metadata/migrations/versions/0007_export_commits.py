"""Export commits: ``tiering_export_commits``, one row per export commit the catalog confirmed
(the table's Iceberg UUID and the snapshot id), with its place in the table's history and the
exported ranges its summary carries, so what a table holds survives the expiry of its snapshots.

No data moves: the table starts empty; an export records the last export commit of a table's
ancestry the first time it holds the table.

Revision ID: 0007_export_commits
Revises: 0006_export_leases
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_export_commits"
down_revision = "0006_export_leases"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tiering_export_commits",
        sa.Column("table_uuid", sa.String(36), primary_key=True),
        sa.Column("snapshot_id", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("catalog", sa.String(255), nullable=False),
        sa.Column("table_name", sa.String(1024), nullable=False),
        sa.Column("sequence_number", sa.BigInteger(), nullable=False),
        sa.Column("timestamp_ms", sa.BigInteger(), nullable=False),
        sa.Column("exported", sa.Text(), nullable=False),
        sa.Column("lease_token", sa.BigInteger(), nullable=False),
        sa.Column("recorded_ms", sa.BigInteger(), nullable=False),
    )
    op.create_index(
        "ix_export_commits_position", "tiering_export_commits", ["table_uuid", "sequence_number", "timestamp_ms"]
    )


def downgrade() -> None:
    op.drop_index("ix_export_commits_position", table_name="tiering_export_commits")
    op.drop_table("tiering_export_commits")
