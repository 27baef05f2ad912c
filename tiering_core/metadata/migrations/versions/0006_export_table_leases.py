"""Export table leases: ``tiering_export_tables``, one row per Iceberg table the export writes
(its catalog's name and ``namespace.name``) holding the export lease and its fencing token, so
one export of a table runs at a time, fenced like a partition's runs.

No data moves: the table starts empty; a row is made when a table's lease is first taken.

Revision ID: 0006_export_leases
Revises: 0005_counters
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_export_leases"
down_revision = "0005_counters"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tiering_export_tables",
        sa.Column("catalog", sa.String(255), primary_key=True),
        sa.Column("table_name", sa.String(1024), primary_key=True),
        sa.Column("lease_holder", sa.String(255), nullable=True),
        sa.Column("lease_token", sa.BigInteger(), nullable=False),
        sa.Column("lease_expires_ms", sa.BigInteger(), nullable=False),
        sa.Column("fencing_counter", sa.BigInteger(), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_ms", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("tiering_export_tables")
