"""child jobs: a pipeline step's or sweep trial's key under its parent, and step reuse

``child_key`` names a child within its parent (a step's name, a trial's number) and is unique per
parent, so a parent-job pass repeated after a crash cannot submit a step twice. ``reuse_key`` is
the hash of what determines a step's outputs (``domain.jobs.parent_jobs``); ``reused_from`` names the
earlier job whose outputs a reused step took.

Revision ID: 0017
Revises: 0016 (tracking; issue 13 was built in parallel, components needed no migration).
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("child_key", sa.String(length=255), nullable=True))
    op.add_column("jobs", sa.Column("reuse_key", sa.String(length=64), nullable=True))
    op.add_column("jobs", sa.Column("reused_from", sa.String(length=128), nullable=True))
    op.create_index("ix_jobs_parent_child_key", "jobs", ["parent_job_id", "child_key"], unique=True)
    op.create_index("ix_jobs_reuse_key", "jobs", ["workspace_id", "reuse_key"])
    # The parent-job loop's question on every pass: which parents are still active.
    op.create_index("ix_jobs_kind_status", "jobs", ["kind", "status"])


def downgrade() -> None:
    op.drop_index("ix_jobs_kind_status", table_name="jobs")
    op.drop_index("ix_jobs_reuse_key", table_name="jobs")
    op.drop_index("ix_jobs_parent_child_key", table_name="jobs")
    # ALTER TABLE … DROP COLUMN (SQLite ≥ 3.35, PostgreSQL): no table copy, as in 0013.
    op.drop_column("jobs", "reused_from")
    op.drop_column("jobs", "reuse_key")
    op.drop_column("jobs", "child_key")
