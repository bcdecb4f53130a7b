"""computes: an id is never given out twice (SQLite AUTOINCREMENT)

Nodes and operations name their compute by id (``nodes.owner_id``, ``operations.resource_id``).
SQLite hands a new row the highest id + 1, so deleting the newest compute and creating another
gave the new one the old one's id, and with it the old one's nodes still terminating and its
operations. PostgreSQL's sequences never go back; this is SQLite only.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    # Nothing references computes by foreign key, so rebuilding the table is safe.
    with op.batch_alter_table("computes", recreate="always", table_kwargs={"sqlite_autoincrement": True}):
        pass
    # Ids already used by computes deleted before this upgrade stay used too (sqlite_sequence has
    # no key: replace the row the rebuild's copy made).
    op.execute(sa.text("DELETE FROM sqlite_sequence WHERE name = 'computes'"))
    op.execute(
        sa.text(
            "INSERT INTO sqlite_sequence (name, seq) SELECT 'computes', MAX(used) FROM ("
            " SELECT MAX(id) AS used FROM computes"
            " UNION ALL SELECT MAX(owner_id) FROM nodes WHERE owner_type = 'computes'"
            " UNION ALL SELECT MAX(resource_id) FROM operations WHERE resource_type = 'computes'"
            ") WHERE used IS NOT NULL HAVING MAX(used) IS NOT NULL"
        )
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    with op.batch_alter_table("computes", recreate="always", table_kwargs={"sqlite_autoincrement": False}):
        pass
