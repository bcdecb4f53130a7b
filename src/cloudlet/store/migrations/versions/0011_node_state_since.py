"""nodes.state_since: when each node entered its state, for the stuck-state table (domain/compute/nodes.py)

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

import time

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("state_since", sa.Float(), nullable=True))
    # The best time the old rows know: ended for a terminated node, idle since for an idle one,
    # registered, else made. A terminating node's retries count from the upgrade instead: counted
    # from when it was made, one stuck before the upgrade would be given up on without a retry.
    op.execute(
        sa.text(
            "UPDATE nodes SET state_since = CASE "
            "WHEN state = 'terminating' THEN :now "
            "WHEN state = 'terminated' AND ended_at IS NOT NULL THEN ended_at "
            "WHEN state = 'idle' AND idle_since IS NOT NULL THEN idle_since "
            "WHEN state IN ('requested', 'allocated', 'starting') THEN created_at "
            "ELSE COALESCE(registered_at, created_at) END"
        ).bindparams(now=time.time())
    )
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.alter_column("state_since", existing_type=sa.Float(), nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_column("state_since")
