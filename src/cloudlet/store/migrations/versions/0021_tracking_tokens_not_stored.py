"""job_runs.spec: a job's MLflow tracking token is no longer stored (issue 24, defect 5)

Run specs kept the token in ``env.MLFLOW_TRACKING_TOKEN``, in plain text. It is now signed into a
spec only as the spec leaves for its agent (``services/tracking/tracking_tokens.py``), and a stored spec
names the job whose token it gets (``tracking_token``: workspace, job, lifetime). This removes the
stored tokens: a run not yet ended gets the claims instead (a spec sent again still carries a
token); an ended one, nothing. Processes already running keep the token they were started with,
which is still checked against its job on every use. Downgrade leaves the specs as they are (a
token cannot be put back, and an older server gives a resent spec no token).

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

TOKEN_ENV = "MLFLOW_TRACKING_TOKEN"
TOKEN_PREFIX = "clm_"  # only cloudlet's own: a token a job set itself is the job's business
LIFETIME_S = 7 * 24 * 3600 + 3600  # tracking_tokens.NO_TIMEOUT_TOKEN_S + TOKEN_GRACE_S

_runs = sa.table(
    "job_runs",
    sa.column("id", sa.String),
    sa.column("job_id", sa.Integer),
    sa.column("state", sa.String),
    sa.column("spec", sa.JSON),
)
_jobs = sa.table("jobs", sa.column("id", sa.Integer), sa.column("workspace_id", sa.Integer))


def upgrade() -> None:
    conn = op.get_bind()
    rows = conn.execute(
        sa.select(_runs.c.id, _runs.c.state, _runs.c.spec, _jobs.c.workspace_id).join(
            _jobs, _jobs.c.id == _runs.c.job_id
        )
    ).all()
    for run_id, state, spec, workspace_id in rows:
        env: dict[str, Any] = dict((spec or {}).get("env") or {})
        token = env.get(TOKEN_ENV)
        if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX):
            continue
        del env[TOKEN_ENV]
        changed = {**spec, "env": env}
        if state != "exited":
            changed["tracking_token"] = {"w": workspace_id, "j": spec.get("job"), "s": LIFETIME_S}
        conn.execute(sa.update(_runs).where(_runs.c.id == run_id).values(spec=changed))


def downgrade() -> None:
    pass
