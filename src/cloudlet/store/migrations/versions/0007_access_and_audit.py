"""revocable access: key expiry, revocation time, last use and rotation; disabled users; the audit log

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_AUDIT_INDEXES = ("at", "actor", "action", "target")


def upgrade() -> None:
    # Every new column is nullable: existing keys read as never expiring, never revoked (unless
    # their old `revoked` flag says so) and not yet used; existing users as enabled.
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.add_column(sa.Column("revoked_on", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("expires_on", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("last_used_on", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("replaced_by", sa.String(length=36), nullable=True))
    with op.batch_alter_table("principals", schema=None) as batch_op:
        batch_op.add_column(sa.Column("disabled_on", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(length=160), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("target", sa.String(length=1024), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.Column("request_id", sa.String(length=64), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    for column in _AUDIT_INDEXES:
        op.create_index(f"ix_audit_log_{column}", "audit_log", [column])


def downgrade() -> None:
    for column in _AUDIT_INDEXES:
        op.drop_index(f"ix_audit_log_{column}", table_name="audit_log")
    op.drop_table("audit_log")
    with op.batch_alter_table("principals", schema=None) as batch_op:
        batch_op.drop_column("disabled_on")
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_column("replaced_by")
        batch_op.drop_column("last_used_on")
        batch_op.drop_column("expires_on")
        batch_op.drop_column("revoked_on")
