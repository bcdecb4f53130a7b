"""instance reports, schedule ticks, SSH policy, and the queue index

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("report", sa.JSON(), nullable=False, server_default=sa.text("'{}'")))
    with op.batch_alter_table("computes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("schedule_checked_at", sa.Float(), nullable=True))
    with op.batch_alter_table("workspaces", schema=None) as batch_op:
        batch_op.add_column(sa.Column("allow_ssh_public_access", sa.Boolean(), nullable=True))
    op.create_index(
        "ix_jobs_queue", "jobs", ["workspace_id", "compute_name", "status", "priority", "submitted_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_queue", table_name="jobs")
    with op.batch_alter_table("workspaces", schema=None) as batch_op:
        batch_op.drop_column("allow_ssh_public_access")
    with op.batch_alter_table("computes", schema=None) as batch_op:
        batch_op.drop_column("schedule_checked_at")
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_column("report")
