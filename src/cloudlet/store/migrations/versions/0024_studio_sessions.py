"""studio_sessions: the studio's server-side browser sessions and one-time sign-in links

Only a hash of the cookie's (or link's) value is stored (issue 27).

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "studio_sessions",
        sa.Column("id_hash", sa.String(64), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column(
            "principal_id",
            sa.Integer(),
            sa.ForeignKey("principals.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("key_id", sa.String(36), nullable=True),
        sa.Column("csrf_token", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("last_seen_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_studio_sessions_principal_id", "studio_sessions", ["principal_id"])


def downgrade() -> None:
    op.drop_index("ix_studio_sessions_principal_id", table_name="studio_sessions")
    op.drop_table("studio_sessions")
