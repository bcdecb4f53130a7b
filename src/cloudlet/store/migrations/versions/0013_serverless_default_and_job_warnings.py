"""workspaces.default_instance_type, the size a job without ``compute`` runs serverless on;
jobs.warnings, what submission noticed but did not refuse (a CUDA image on a CPU size)

NULL means the built-in default (Standard_DS3_v2, as Azure ML's serverless compute); an
administrator sets another with ``cloudlet workspace create -n WS --default-instance-type SIZE``.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workspaces", schema=None) as batch_op:
        batch_op.add_column(sa.Column("default_instance_type", sa.String(length=64), nullable=True))
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("warnings", sa.JSON(), nullable=True))


def downgrade() -> None:
    # ALTER TABLE … DROP COLUMN (SQLite ≥ 3.35, PostgreSQL), not a batch copy: copying a table
    # that other rows reference (job runs, code assets) drops the referenced table under
    # SQLite's foreign keys, which fails once such rows exist.
    op.drop_column("jobs", "warnings")
    op.drop_column("workspaces", "default_instance_type")
