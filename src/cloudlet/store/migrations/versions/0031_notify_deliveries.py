"""notify_deliveries: the outbox and delivery log of job notifications (issue 29 item 4)

``notification_deliveries``: one row per email recipient or webhook a job's final status
notifies, written in the transaction that ends the job; the notification loop sends it,
retries it with backoff and records each try (store/schema.py ``NotificationDelivery``).

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "notification_deliveries",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("target", sa.String(length=255), nullable=False),
        sa.Column("event", sa.String(length=32), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("next_try_at", sa.Float(), nullable=True),
        sa.Column("delivered_at", sa.Float(), nullable=True),
    )
    op.create_index("ix_notification_deliveries_job_id", "notification_deliveries", ["job_id"])
    op.create_index("ix_notification_deliveries_due", "notification_deliveries", ["state", "next_try_at"])


def downgrade() -> None:
    op.drop_index("ix_notification_deliveries_due", table_name="notification_deliveries")
    op.drop_index("ix_notification_deliveries_job_id", table_name="notification_deliveries")
    op.drop_table("notification_deliveries")
