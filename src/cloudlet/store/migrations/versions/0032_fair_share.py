"""fair_share: teams, their shares of pools, and a job's tier and preemption count (issue 31)

``teams``, ``team_members`` (one team per user) and ``team_shares`` (a team's weight of a location's or
a compute's cores, and its borrow limit); ``jobs.job_tier`` (``queue_settings.job_tier``, read by
the scheduler for the whole queue) and ``jobs.preemptions`` (times the scheduler preempted it).

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "teams",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(length=64), nullable=False, unique=True),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "team_members",
        sa.Column("principal_name", sa.String(length=128), primary_key=True),
        sa.Column("team_id", sa.Integer(), sa.ForeignKey("teams.id", ondelete="CASCADE"), nullable=False),
    )
    op.create_index("ix_team_members_team_id", "team_members", ["team_id"])
    op.create_table(
        "team_shares",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("team_id", sa.Integer(), sa.ForeignKey("teams.id", ondelete="CASCADE"), nullable=False),
        sa.Column("pool_kind", sa.String(length=16), nullable=False),
        sa.Column(
            "workspace_id", sa.Integer(), sa.ForeignKey("workspaces.id", ondelete="CASCADE"), nullable=True
        ),
        sa.Column("pool_name", sa.String(length=64), nullable=False),
        sa.Column("share", sa.Float(), nullable=False),
        sa.Column("borrow_limit", sa.Float(), nullable=True),
        sa.UniqueConstraint("team_id", "pool_kind", "workspace_id", "pool_name"),
    )
    op.create_index("ix_team_shares_team_id", "team_shares", ["team_id"])
    op.create_index("ix_team_shares_pool", "team_shares", ["pool_kind", "workspace_id", "pool_name"])
    # Plain ALTER TABLE, not a batch: on SQLite a batch that rebuilds ``jobs`` would lose the
    # expression indexes it cannot reflect (``ix_jobs_list_duration``, ``ix_jobs_queue_order``).
    op.add_column("jobs", sa.Column("job_tier", sa.String(length=16), nullable=True))
    op.add_column("jobs", sa.Column("preemptions", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    op.drop_column("jobs", "preemptions")  # SQLite >= 3.35 drops a column in place (see upgrade)
    op.drop_column("jobs", "job_tier")
    op.drop_index("ix_team_shares_pool", table_name="team_shares")
    op.drop_index("ix_team_shares_team_id", table_name="team_shares")
    op.drop_table("team_shares")
    op.drop_index("ix_team_members_team_id", table_name="team_members")
    op.drop_table("team_members")
    op.drop_table("teams")
