"""an index on nodes.token_hash: agent requests are authenticated by their token before their body is read

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_nodes_token_hash", "nodes", ["token_hash"])


def downgrade() -> None:
    op.drop_index("ix_nodes_token_hash", table_name="nodes")
