"""online_deployments.serving and .autoscaled_instances: what the online lease holder runs

``serving`` is the lease holder's report of a deployment's replicas (their addresses and
readiness, the serving generation), so every other server's gateway reaches them;
``autoscaled_instances`` is autoscale's current count, so a restart or a new lease holder starts
from it (issue 26). Both NULL until the holder writes them.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("online_deployments", schema=None) as batch_op:
        batch_op.add_column(sa.Column("serving", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("autoscaled_instances", sa.Integer(), nullable=True))


def downgrade() -> None:
    # DROP COLUMN, not a batch copy (see 0013): online_deployment_metrics references the table.
    op.drop_column("online_deployments", "autoscaled_instances")
    op.drop_column("online_deployments", "serving")
