"""Migration 0021: the MLflow tracking tokens stored in plain text in run specs are removed (a
run not yet ended keeps the claims its token is signed from on delivery); other environment
variables, and a token a job set itself, are left (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text

from cloudlet.services.tracking import tracking_tokens
from cloudlet.store import db
from tests.integration.test_migrations import _add_workspace, _differences, _upgrade

JOB = (
    "INSERT INTO jobs (id, workspace_id, name, spec, kind, status, priority, instance_count, attempt, "
    "max_attempts, cancel_requested, created_by, submitted_at) "
    "VALUES (:id, 1, :name, '{}', 'command', :status, 2, 1, 1, 3, false, 'a', 0)"
)
RUN = (
    "INSERT INTO job_runs (id, job_id, attempt, rank, node_id, state, spec, log_size, assigned_at) "
    "VALUES (:id, :job, 1, 0, 'n1', :state, :spec, 0, 0)"
)


def _spec(job: str, token: str) -> str:
    return json.dumps({"run": f"r-{job}", "job": job, "env": {"A": "1", "MLFLOW_TRACKING_TOKEN": token}})


def _specs(engine: Engine) -> dict[str, dict[str, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT id, spec FROM job_runs")).all()
    return {run: (json.loads(spec) if isinstance(spec, str) else spec) for run, spec in rows}


def _tokens_go(engine: Engine) -> None:
    _upgrade(engine, "0020")
    with engine.begin() as conn:
        _add_workspace(conn)
        for job_id, name, status in ((1, "live", "Running"), (2, "done", "Completed"), (3, "own", "Running")):
            conn.execute(text(JOB), {"id": job_id, "name": name, "status": status})
        conn.execute(
            text(RUN), {"id": "r-live", "job": 1, "state": "running", "spec": _spec("live", "clm_a.b")}
        )
        conn.execute(
            text(RUN), {"id": "r-done", "job": 2, "state": "exited", "spec": _spec("done", "clm_c.d")}
        )
        conn.execute(text(RUN), {"id": "r-own", "job": 3, "state": "running", "spec": _spec("own", "theirs")})
    _upgrade(engine, "head")
    assert _differences(engine) == []
    specs = _specs(engine)
    assert specs["r-live"]["env"] == {"A": "1"} and specs["r-done"]["env"] == {"A": "1"}
    assert specs["r-live"][tracking_tokens.TOKEN_FIELD] == {
        "w": 1,
        "j": "live",
        "s": tracking_tokens.NO_TIMEOUT_TOKEN_S + tracking_tokens.TOKEN_GRACE_S,
    }
    assert tracking_tokens.TOKEN_FIELD not in specs["r-done"]
    assert specs["r-own"]["env"]["MLFLOW_TRACKING_TOKEN"] == "theirs"
    assert "clm_" not in json.dumps(specs)
    # What a resent spec then carries: a token signed on the way out.
    sealed = tracking_tokens.seal([specs["r-live"]], "s" * 64)[0]
    assert sealed["env"]["MLFLOW_TRACKING_TOKEN"].startswith("clm_")
    assert tracking_tokens.claims_of("s" * 64, sealed["env"]["MLFLOW_TRACKING_TOKEN"]) == (1, "live")


def test_sqlite_tracking_tokens_leave_the_store(tmp_path: Path) -> None:
    engine = db.make_engine(db.sqlite_url(tmp_path))
    _tokens_go(engine)
    engine.dispose()


@pytest.mark.postgres
def test_postgres_tracking_tokens_leave_the_store(postgres_url: str) -> None:
    engine = create_engine(db.normalise_url(postgres_url))
    _tokens_go(engine)
    engine.dispose()
