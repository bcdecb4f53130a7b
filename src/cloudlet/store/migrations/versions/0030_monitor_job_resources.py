"""monitor_job_resources: a job's resource samples, downsampled into buckets per node

``job_resource_buckets`` (see ``domain/jobs/resource_samples.py``): bounded rows per job and node
whatever the job's length.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None

VALUES = (
    "cpu_percent",
    "memory_bytes",
    "read_bps",
    "write_bps",
    "disk_used_bytes",
    "net_rx_bps",
    "net_tx_bps",
    "gpu_percent",
    "gpu_memory_bytes",
    "gpu_count",
)


def upgrade() -> None:
    op.create_table(
        "job_resource_buckets",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("node_id", sa.String(length=32), nullable=False),
        sa.Column("level", sa.Integer(), nullable=False),
        sa.Column("start", sa.Float(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        *(sa.Column(name, sa.Float(), nullable=True) for name in VALUES),
    )
    op.create_index(
        "ix_job_resource_buckets_key",
        "job_resource_buckets",
        ["job_id", "node_id", "level", "start"],
        unique=True,
    )


def downgrade() -> None:
    op.drop_index("ix_job_resource_buckets_key", table_name="job_resource_buckets")
    op.drop_table("job_resource_buckets")
