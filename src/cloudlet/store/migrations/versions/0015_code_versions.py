"""code_versions: Azure ML's named, versioned code assets (the ARM ``codes`` routes)

Each names the native snapshot (``code_assets.hash``) its uploaded folder was packed into, and
the SDK's content hash it is found by (``GET codes/{any}/versions?hash=…``).

Revision ID: 0015
Revises: 0014 (assets). Issue 12 was built in parallel: 0013 (serverless default), 0014 (assets),
then this one.
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "code_versions",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("workspace_id", sa.Integer(), sa.ForeignKey("workspaces.id"), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("code_uri", sa.String(2048), nullable=False),
        sa.Column("hash_sha256", sa.String(64), nullable=True),
        sa.Column("hash_version", sa.String(16), nullable=True),
        sa.Column("snapshot", sa.String(64), nullable=False),
        sa.Column("is_anonymous", sa.Boolean(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("created_by", sa.String(255), nullable=False),
        sa.Column("created_on", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("workspace_id", "name", "version"),
    )
    op.create_index("ix_code_versions_hash", "code_versions", ["workspace_id", "hash_sha256"])


def downgrade() -> None:
    op.drop_index("ix_code_versions_hash", table_name="code_versions")
    op.drop_table("code_versions")
