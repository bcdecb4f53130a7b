"""workspaces.storage_quota_gib, the GiB a workspace's data may take

NULL means the server's default (``CLOUDLET_WORKSPACE_STORAGE_GIB``, 100 GiB); an administrator
sets another with ``cloudlet workspace create -n WS --storage-quota-gib N``.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workspaces", schema=None) as batch_op:
        batch_op.add_column(sa.Column("storage_quota_gib", sa.Integer(), nullable=True))


def downgrade() -> None:
    # DROP COLUMN, not a batch copy (see 0013: other tables reference workspaces).
    op.drop_column("workspaces", "storage_quota_gib")
