"""operations target any resource (resource_type, resource_id, resource_name); a node has one owner
reference (owner_type, owner_id) instead of compute_id, compute_name and serverless_job

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

# operations is the parent of operation_steps (ON DELETE CASCADE), so on SQLite it must not be
# rebuilt by a batch "move and copy": dropping the old table would cascade and empty the step
# journal. Its columns are added and dropped in place (ALTER TABLE … DROP COLUMN, SQLite ≥ 3.35);
# the new NOT NULL columns take a server default for the rows already there. nodes is no table's
# parent, so it is rebuilt in a batch (SQLite) and ends exactly as the models say.

# A serverless (or local) job's node named its job "<workspace id>:<job name>".
_JOB_OF_NODE = (
    "SELECT j.id FROM jobs j WHERE j.workspace_id = nodes.workspace_id "
    "AND CAST(j.workspace_id AS VARCHAR(20)) || ':' || j.name = nodes.serverless_job"
)
# Nodes older than serverless jobs may lack compute_id: their compute is found by name.
_COMPUTE_OF_NODE = (
    "SELECT c.id FROM computes c WHERE c.workspace_id = nodes.workspace_id AND c.name = nodes.compute_name"
)


def upgrade() -> None:
    op.add_column(
        "operations",
        sa.Column("resource_type", sa.String(length=32), nullable=False, server_default="computes"),
    )
    op.add_column("operations", sa.Column("resource_id", sa.Integer(), nullable=True))
    op.add_column(
        "operations", sa.Column("resource_name", sa.String(length=128), nullable=False, server_default="")
    )
    op.execute("UPDATE operations SET resource_id = compute_id, resource_name = compute_name")
    op.drop_column("operations", "compute_id")
    op.drop_column("operations", "compute_name")
    if op.get_context().dialect.name != "sqlite":  # SQLite cannot drop a default in place
        op.alter_column("operations", "resource_type", server_default=None)
        op.alter_column("operations", "resource_name", server_default=None)
    op.create_index("ix_operations_resource", "operations", ["resource_type", "resource_id"])

    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("owner_type", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("owner_id", sa.Integer(), nullable=True))
    op.execute(
        f"UPDATE nodes SET owner_type = 'jobs', owner_id = ({_JOB_OF_NODE}) WHERE serverless_job IS NOT NULL"
    )
    op.execute(
        "UPDATE nodes SET owner_type = 'computes', "
        f"owner_id = COALESCE(compute_id, ({_COMPUTE_OF_NODE})) WHERE serverless_job IS NULL"
    )
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.alter_column("owner_type", existing_type=sa.String(length=16), nullable=False)
        batch_op.drop_index("ix_nodes_compute_id")
        batch_op.drop_column("serverless_job")
        batch_op.drop_column("compute_name")
        batch_op.drop_column("compute_id")
        batch_op.create_index("ix_nodes_owner", ["owner_type", "owner_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("compute_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("compute_name", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("serverless_job", sa.String(length=128), nullable=True))
    op.execute(
        "UPDATE nodes SET compute_id = owner_id, compute_name = COALESCE("
        "(SELECT c.name FROM computes c WHERE c.id = nodes.owner_id), '') WHERE owner_type = 'computes'"
    )
    op.execute(
        "UPDATE nodes SET "
        "compute_name = COALESCE((SELECT j.compute_name FROM jobs j WHERE j.id = nodes.owner_id), ''), "
        "serverless_job = (SELECT CAST(j.workspace_id AS VARCHAR(20)) || ':' || j.name FROM jobs j "
        "WHERE j.id = nodes.owner_id) WHERE owner_type = 'jobs'"
    )
    op.execute("UPDATE nodes SET compute_name = '' WHERE compute_name IS NULL")
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.alter_column("compute_name", existing_type=sa.String(length=64), nullable=False)
        batch_op.drop_index("ix_nodes_owner")
        batch_op.drop_column("owner_id")
        batch_op.drop_column("owner_type")
        batch_op.create_index("ix_nodes_compute_id", ["compute_id"], unique=False)

    op.drop_index("ix_operations_resource", table_name="operations")
    op.add_column("operations", sa.Column("compute_id", sa.Integer(), nullable=True))
    op.add_column(
        "operations", sa.Column("compute_name", sa.String(length=64), nullable=False, server_default="")
    )
    op.execute(
        "UPDATE operations SET compute_id = resource_id, compute_name = resource_name "
        "WHERE resource_type = 'computes'"
    )
    op.drop_column("operations", "resource_name")
    op.drop_column("operations", "resource_id")
    op.drop_column("operations", "resource_type")
