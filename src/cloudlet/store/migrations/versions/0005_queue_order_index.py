"""the queue index in scheduling order (priority descending), so the queue head needs no sort

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_jobs_queue", table_name="jobs")
    op.create_index(
        "ix_jobs_queue_order",
        "jobs",
        ["workspace_id", "compute_name", "status", sa.literal_column("priority").desc(), "submitted_at"],
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_queue_order", table_name="jobs")
    op.create_index(
        "ix_jobs_queue", "jobs", ["workspace_id", "compute_name", "status", "priority", "submitted_at"]
    )
