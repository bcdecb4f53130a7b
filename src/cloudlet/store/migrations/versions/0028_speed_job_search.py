"""speed_job_search: the job list's filtered pages within budget at 100,000 jobs, and a
deployment's demand across servers (issue 27)

- ``ix_jobs_list_duration`` loses its parent column: PostgreSQL's planner treats
  ``parent_job_id IS NULL`` as a filter, not an equality, so it never read that index in order
  and sorted the workspace's jobs instead.
- ``ix_jobs_list_status`` gains the parent column after its order: a status page's count tests
  "top-level" in the index instead of reading every match's row.
- On PostgreSQL, where the ``pg_trgm`` extension exists (or can be made), a trigram GIN index on
  the names: a name search reads the matching jobs instead of scanning the workspace's. Without
  the extension the search scans newest first as before (docs/performance.md).
- ``online_deployments.demand_until``: a server that does not hold the online lease holds a
  request for a deployment scaled to zero and says so here; the holder starts a replica
  (``control/online_serving.py``).

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-07
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

_log = logging.getLogger(__name__)
_DURATION = sa.text("coalesce(ended_at - started_at, -1.0)")  # job_search's key (schema.JOB_DURATION)


def upgrade() -> None:
    with op.batch_alter_table("online_deployments") as batch:
        batch.add_column(sa.Column("demand_until", sa.Float(), nullable=True))
    op.drop_index("ix_jobs_list_duration", table_name="jobs")
    op.create_index("ix_jobs_list_duration", "jobs", ["workspace_id", _DURATION, "submitted_at", "id"])
    op.drop_index("ix_jobs_list_status", table_name="jobs")
    op.create_index(
        "ix_jobs_list_status", "jobs", ["workspace_id", "status", "submitted_at", "id", "parent_job_id"]
    )
    bind = op.get_bind()
    if bind.dialect.name == "postgresql" and _trigrams(bind):
        op.execute(
            "CREATE INDEX ix_jobs_name_trgm ON jobs USING gin (name gin_trgm_ops, display_name gin_trgm_ops)"
        )


def _trigrams(bind: sa.Connection) -> bool:
    """Whether pg_trgm is installed, installing it when this role may (a trusted extension since
    PostgreSQL 13: a database owner may). In a savepoint: a refusal must not abort the migration."""
    try:
        with bind.begin_nested():
            bind.execute(sa.text("CREATE EXTENSION IF NOT EXISTS pg_trgm"))
    except sa.exc.DBAPIError as exc:
        _log.warning("no pg_trgm extension (%s): the job list's name search scans", exc.orig)
        return False
    return True


def downgrade() -> None:
    with op.batch_alter_table("online_deployments") as batch:
        batch.drop_column("demand_until")
    op.execute("DROP INDEX IF EXISTS ix_jobs_name_trgm")
    op.drop_index("ix_jobs_list_status", table_name="jobs")
    op.create_index("ix_jobs_list_status", "jobs", ["workspace_id", "status", "submitted_at", "id"])
    op.drop_index("ix_jobs_list_duration", table_name="jobs")
    op.create_index(
        "ix_jobs_list_duration", "jobs", ["workspace_id", "parent_job_id", _DURATION, "submitted_at", "id"]
    )
