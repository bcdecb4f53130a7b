"""sched_queue_order: a compute's queue index puts spot-tier jobs last; runs by end time (issue 31)

The scheduler's order is spot last, then priority (high first), then FIFO. With the spot test in
the index (``coalesce(job_tier, '') = 'spot'``: never NULL, so SQLite and PostgreSQL sort it the
same) the queue's head is still read in index order, without sorting the compute's whole queue
on every submission and exit.

``ix_job_runs_ended_at``: a fair-share compute's usage is brought up to date each scheduling round
from the runs that ended since the last (``services/jobs/fair_usage.py``), a few rows however long
its history.

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_jobs_queue_order", table_name="jobs")
    op.create_index(
        "ix_jobs_queue_order",
        "jobs",
        [
            "workspace_id",
            "compute_name",
            "status",
            sa.text("(coalesce(job_tier, '') = 'spot')"),
            sa.literal_column("priority").desc(),
            "submitted_at",
        ],
    )
    op.create_index("ix_job_runs_ended_at", "job_runs", ["ended_at"])


def downgrade() -> None:
    op.drop_index("ix_job_runs_ended_at", table_name="job_runs")
    op.drop_index("ix_jobs_queue_order", table_name="jobs")
    op.create_index(
        "ix_jobs_queue_order",
        "jobs",
        ["workspace_id", "compute_name", "status", sa.literal_column("priority").desc(), "submitted_at"],
    )
