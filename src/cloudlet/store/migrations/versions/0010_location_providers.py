"""providers from configuration: a location's provider configuration; nodes name their location's
provider by the location (up to 64 characters)

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Existing locations get an empty configuration: their provider's defaults, as before.
    with op.batch_alter_table("locations", schema=None) as batch_op:
        batch_op.add_column(sa.Column("config", sa.JSON(), nullable=False, server_default=sa.text("'{}'")))
    # A node records its provider's kind, whose name (like a location's) may be up to 64 characters;
    # the control loops find a node's provider by its location (providers/provider_set.py).
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.alter_column(
            "provider",
            existing_type=sa.String(length=32),
            type_=sa.String(length=64),
            existing_nullable=False,
        )


def downgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.alter_column(
            "provider",
            existing_type=sa.String(length=64),
            type_=sa.String(length=32),
            existing_nullable=False,
        )
    with op.batch_alter_table("locations", schema=None) as batch_op:
        batch_op.drop_column("config")
