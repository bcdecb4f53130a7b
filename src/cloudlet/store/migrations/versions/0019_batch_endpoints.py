"""batch_endpoints, batch_deployments: batch endpoints and their deployments (issue 14, item 4)

Revision ID: 0019
Revises: 0018 (online endpoints, written in parallel; the chain is fixed at merge). On this branch
alone (no 0018 yet) it was developed and tested with down_revision = "0017".
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "batch_endpoints",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("workspace_id", sa.Integer(), sa.ForeignKey("workspaces.id"), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("created_by", sa.String(128), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("modified_at", sa.Float(), nullable=False),
        sa.UniqueConstraint("workspace_id", "name"),
    )
    op.create_table(
        "batch_deployments",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "endpoint_id",
            sa.Integer(),
            sa.ForeignKey("batch_endpoints.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("created_by", sa.String(128), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("modified_at", sa.Float(), nullable=False),
        sa.UniqueConstraint("endpoint_id", "name"),
    )
    op.create_index("ix_batch_deployments_endpoint_id", "batch_deployments", ["endpoint_id"])


def downgrade() -> None:
    op.drop_index("ix_batch_deployments_endpoint_id", table_name="batch_deployments")
    op.drop_table("batch_deployments")
    op.drop_table("batch_endpoints")
