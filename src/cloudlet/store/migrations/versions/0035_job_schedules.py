"""job_schedules: Azure ML job schedules (``az ml schedule``)

``job_schedules``: one row per schedule, its document (trigger, a full ``create_job`` job
document) and what the schedule loop keeps to fire it once per fire time (store/schema.py
``JobSchedule``, domain/jobs/job_schedule.py, control/job_schedules.py).

Revision ID: 0035
Revises: 0034
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0035"
down_revision = "0034"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_schedules",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "workspace_id", sa.Integer(), sa.ForeignKey("workspaces.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("is_enabled", sa.Boolean(), nullable=False),
        sa.Column("created_by", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("fired_through", sa.Float(), nullable=False),
        sa.Column("next_fire_at", sa.Float(), nullable=True),
        sa.Column("last_fired_at", sa.Float(), nullable=True),
        sa.Column("last_job_name", sa.String(length=128), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("last_error_at", sa.Float(), nullable=True),
        sa.UniqueConstraint("workspace_id", "name"),
    )
    op.create_index("ix_job_schedules_workspace_id", "job_schedules", ["workspace_id"])
    op.create_index("ix_job_schedules_next_fire_at", "job_schedules", ["next_fire_at"])


def downgrade() -> None:
    op.drop_index("ix_job_schedules_next_fire_at", table_name="job_schedules")
    op.drop_index("ix_job_schedules_workspace_id", table_name="job_schedules")
    op.drop_table("job_schedules")
