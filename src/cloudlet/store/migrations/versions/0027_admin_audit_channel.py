"""admin_audit_channel: each audit entry records the front door the change came through

``audit_log.channel``: ``rest`` (the native API), ``arm`` (the Azure ML facade), ``mlflow``,
``cli`` (the cloudlet client and CLI), ``studio`` (the web UI), or NULL for the control plane's
own changes and entries written before this revision. Bound per request
(services/access/audit.py), so services record it without each caller passing it.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("audit_log") as batch_op:
        batch_op.add_column(sa.Column("channel", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("audit_log") as batch_op:
        batch_op.drop_column("channel")
