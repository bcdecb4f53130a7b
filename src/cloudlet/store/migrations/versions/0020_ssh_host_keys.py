"""ssh_host_keys: SSH host keys learned on first use, per location or attached VM (issue 15)

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ssh_host_keys",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("scope", sa.String(80), nullable=False),
        sa.Column("address", sa.String(255), nullable=False),
        sa.Column("port", sa.Integer(), nullable=False),
        sa.Column("key_type", sa.String(64), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("first_seen", sa.Float(), nullable=False),
        sa.Column("refused_key", sa.Text(), nullable=True),
        sa.Column("refused_at", sa.Float(), nullable=True),
        sa.UniqueConstraint("scope", "address", "port"),
    )


def downgrade() -> None:
    op.drop_table("ssh_host_keys")
