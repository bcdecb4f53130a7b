"""tracking: MLflow's experiments, runs, metrics (history and latest), params, tags, logged models

Served by api/mlflow/ (MLflow's REST tracking API) from cloudlet's own store, so that a job's
metrics are rows of its own tables (a job's run: ``tracking_runs.job_id``).

Revision ID: 0016
Revises: 0015 (code versions). Issue 13 was built in parallel: this revision is the tracking one.
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def _run_fk() -> sa.ForeignKey:
    return sa.ForeignKey("tracking_runs.id", ondelete="CASCADE")


def upgrade() -> None:
    op.create_table(
        "tracking_experiments",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("workspace_id", sa.Integer(), sa.ForeignKey("workspaces.id"), nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("lifecycle_stage", sa.String(16), nullable=False),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.UniqueConstraint("workspace_id", "name"),
    )
    op.create_table(
        "tracking_runs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("workspace_id", sa.Integer(), sa.ForeignKey("workspaces.id"), nullable=False),
        sa.Column("experiment_id", sa.Integer(), sa.ForeignKey("tracking_experiments.id"), nullable=False),
        sa.Column("run_uuid", sa.String(128), nullable=False),
        sa.Column(
            "job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=True, unique=True
        ),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("user_id", sa.String(256), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("start_time", sa.BigInteger(), nullable=True),
        sa.Column("end_time", sa.BigInteger(), nullable=True),
        sa.Column("lifecycle_stage", sa.String(16), nullable=False),
        sa.Column("inputs", sa.JSON(), nullable=False),
        sa.Column("outputs", sa.JSON(), nullable=False),
        sa.UniqueConstraint("workspace_id", "run_uuid"),
    )
    op.create_index("ix_tracking_runs_experiment_id", "tracking_runs", ["experiment_id"])
    op.create_table(
        "tracking_metrics",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("run_id", sa.Integer(), _run_fk(), nullable=False),
        sa.Column("key", sa.String(250), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("is_nan", sa.Boolean(), nullable=False),
        sa.Column("timestamp", sa.BigInteger(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_tracking_metrics_history", "tracking_metrics", ["run_id", "key", "step", "timestamp"])
    op.create_table(
        "tracking_latest_metrics",
        sa.Column("run_id", sa.Integer(), _run_fk(), primary_key=True),
        sa.Column("key", sa.String(250), primary_key=True),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("is_nan", sa.Boolean(), nullable=False),
        sa.Column("timestamp", sa.BigInteger(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "tracking_logged_models",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("workspace_id", sa.Integer(), sa.ForeignKey("workspaces.id"), nullable=False),
        sa.Column("model_id", sa.String(64), nullable=False),
        sa.Column("experiment_id", sa.Integer(), sa.ForeignKey("tracking_experiments.id"), nullable=False),
        sa.Column("run_id", sa.Integer(), _run_fk(), nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("model_type", sa.String(256), nullable=True),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("status_message", sa.Text(), nullable=True),
        sa.Column("creator", sa.String(256), nullable=False),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("lifecycle_stage", sa.String(16), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.UniqueConstraint("workspace_id", "model_id"),
    )
    op.create_index("ix_tracking_logged_models_run_id", "tracking_logged_models", ["run_id"])
    for table in ("tracking_params", "tracking_tags"):
        op.create_table(
            table,
            sa.Column("run_id", sa.Integer(), _run_fk(), primary_key=True),
            sa.Column("key", sa.String(250), primary_key=True),
            sa.Column("value", sa.Text(), nullable=False),
        )


def downgrade() -> None:
    op.drop_index("ix_tracking_logged_models_run_id", table_name="tracking_logged_models")
    op.drop_table("tracking_logged_models")
    for table in ("tracking_tags", "tracking_params", "tracking_latest_metrics"):
        op.drop_table(table)
    op.drop_index("ix_tracking_metrics_history", table_name="tracking_metrics")
    op.drop_table("tracking_metrics")
    op.drop_index("ix_tracking_runs_experiment_id", table_name="tracking_runs")
    op.drop_table("tracking_runs")
    op.drop_table("tracking_experiments")
