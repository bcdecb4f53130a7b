"""Migration 0013 (workspaces.default_instance_type, jobs.warnings) on a store populated at 0012:
an existing workspace runs serverless jobs on the built-in default, an existing job has no
warnings, and the schema at head matches the models (SQLite and PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.orm import Session

from cloudlet.services.access import workspaces
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.views import jobs as native_jobs
from cloudlet.store import db
from cloudlet.store.schema import Job, Workspace
from tests.integration.test_migrations import _add_workspace, _differences, _upgrade

SPEC = '{"type": "command", "command": "echo hi", "resources": {"instance_type": "Standard_DS3_v2"}}'


def _rows_carried(engine: Engine) -> None:
    _upgrade(engine, "0012")
    with engine.begin() as conn:
        _add_workspace(conn)
        conn.execute(
            text(
                "INSERT INTO jobs (id, workspace_id, name, compute_name, spec, status, priority, "
                "instance_count, attempt, max_attempts, cancel_requested, created_by, submitted_at) "
                f"VALUES (1, 1, 'old', 'serverless', '{SPEC}', 'Completed', 2, 1, 1, 3, false, 'alice', 1.0)"
            )
        )
    _upgrade(engine, "head")
    assert _differences(engine) == []
    with Session(engine) as session:
        ws = session.get(Workspace, 1)
        job = session.get(Job, 1)
        assert ws is not None and job is not None
        assert ws.default_instance_type is None and workspaces.default_instance_type(ws) == "Standard_DS3_v2"
        assert job.warnings is None
        view = native_jobs.render(job, WorkspaceRef("s", "rg", "ws"), [], "http://x", "")
        assert view["warnings"] == [] and view["resources"]["instance_type"] == "Standard_DS3_v2"


def test_sqlite_rows_are_carried_to_0013(tmp_path: Path) -> None:
    engine = db.make_engine(db.sqlite_url(tmp_path))
    _rows_carried(engine)
    engine.dispose()


@pytest.mark.postgres
def test_postgres_rows_are_carried_to_0013(postgres_url: str) -> None:
    engine = create_engine(db.normalise_url(postgres_url))
    _rows_carried(engine)
    engine.dispose()
