"""a job's kind (command now; pipeline, sweep, batch_scoring reserved) and its parent job

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Every existing job is a command job (the only kind there has been): the column's default
    # fills them as it is added. None has a parent. The reference is declared inline (ADD COLUMN
    # … REFERENCES): SQLite adds a column that way but cannot add a constraint to a table, and
    # neither needs the jobs table recreated.
    op.add_column("jobs", sa.Column("kind", sa.String(length=32), nullable=False, server_default="command"))
    op.add_column(
        "jobs",
        sa.Column("parent_job_id", sa.Integer(), sa.ForeignKey("jobs.id"), nullable=True),
        inline_references=True,
    )
    op.create_index("ix_jobs_parent_job_id", "jobs", ["parent_job_id"])


def downgrade() -> None:
    op.drop_index("ix_jobs_parent_job_id", table_name="jobs")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("parent_job_id")
        batch_op.drop_column("kind")
