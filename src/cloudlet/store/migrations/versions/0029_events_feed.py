"""events_feed: the lifecycle events table (issue 29, the events feed)

One row per lifecycle change of a job, compute, node, operation or deployment, written in the
transaction that made the change (``services/core/events.py``), read by ``…/events?since=SEQ``.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("workspace_id", sa.Integer(), nullable=False),
        sa.Column("type", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("compute", sa.String(length=64), nullable=True),
        sa.Column("from_state", sa.String(length=32), nullable=True),
        sa.Column("to_state", sa.String(length=32), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("seq"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_events_at", "events", ["at"])
    op.create_index("ix_events_workspace_seq", "events", ["workspace_id", "seq"])
    op.create_table(
        "event_horizon",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("pruned_below", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("event_horizon")
    op.drop_index("ix_events_workspace_seq", table_name="events")
    op.drop_index("ix_events_at", table_name="events")
    op.drop_table("events")
