"""job_list_indexes: the studio's job list pages read an index in their order (issue 27)

With 100,000 jobs a first page, and a page under a status, compute or submitter filter, reads a
page of index entries instead of sorting the workspace's jobs (services/jobs/job_search.py). A job's
display_name gets its own column (filled from the stored document), so the name search reads it
instead of parsing every job's JSON.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

_INDEXES = {
    # With the names: a name search tests them in the index, not in every job's row.
    "ix_jobs_list_top": ["workspace_id", "parent_job_id", "submitted_at", "id", "name", "display_name"],
    "ix_jobs_list_all": ["workspace_id", "submitted_at", "id"],
    "ix_jobs_list_status": ["workspace_id", "status", "submitted_at", "id"],
    "ix_jobs_list_compute": ["workspace_id", "compute_name", "submitted_at", "id"],
    "ix_jobs_list_creator": ["workspace_id", "created_by", "submitted_at", "id"],
}


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("display_name", sa.String(256), nullable=True))
    extract = (
        "spec ->> 'display_name'"
        if op.get_bind().dialect.name == "postgresql"
        else "json_extract(spec, '$.display_name')"
    )
    op.execute(f"UPDATE jobs SET display_name = substr({extract}, 1, 256)")
    for name, columns in _INDEXES.items():
        op.create_index(name, "jobs", columns)
    # The duration sort's key, the very expression services/jobs/job_search.py orders by.
    duration = sa.text("coalesce(ended_at - started_at, -1.0)")
    op.create_index(
        "ix_jobs_list_duration", "jobs", ["workspace_id", "parent_job_id", duration, "submitted_at", "id"]
    )


def downgrade() -> None:
    for name in [*_INDEXES, "ix_jobs_list_duration"]:
        op.drop_index(name, table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("display_name")
