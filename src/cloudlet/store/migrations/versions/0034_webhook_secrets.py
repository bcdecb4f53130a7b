"""webhook_secrets: a signing secret per workspace for job-notification webhooks

``webhook_secrets``: one row per workspace that has its own secret (made by its first
``webhookSecret/rotate``), with the secret its last rotation replaced and until when that one
still signs (store/schema.py ``WebhookSecret``, domain/jobs/webhook_secrets.py).

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "webhook_secrets",
        sa.Column(
            "workspace_id",
            sa.Integer(),
            sa.ForeignKey("workspaces.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("secret", sa.String(length=64), nullable=False),
        sa.Column("previous_secret", sa.String(length=64), nullable=True),
        sa.Column("previous_until", sa.Float(), nullable=True),
        sa.Column("rotated_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("webhook_secrets")
