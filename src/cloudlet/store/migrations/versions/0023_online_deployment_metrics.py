"""online_deployment_metrics: a deployment's request metrics, summed over every worker

Each worker's gateway adds what it counted since its last flush, so ``show`` reports the
deployment's requests under ``--workers N`` (issue 26).

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "online_deployment_metrics",
        sa.Column(
            "deployment_id",
            sa.Integer(),
            sa.ForeignKey("online_deployments.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("requests", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("failures", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("latency_ms", sa.Float(), nullable=False, server_default="0"),
    )


def downgrade() -> None:
    op.drop_table("online_deployment_metrics")
