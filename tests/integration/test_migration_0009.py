"""Migration 0009 (a job's kind and parent) on a store populated at 0007: the jobs it held are
found, shown and listed as before, now as command jobs with no parent; a new job can name a parent;
and the schema at head matches the models (SQLite and PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text

from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.jobs import jobs as job_service
from cloudlet.services.views import jobs as native_jobs
from cloudlet.store import db
from cloudlet.store.schema import Job, Workspace
from tests.integration.test_migrations import _add_workspace, _differences, _upgrade

REF = WorkspaceRef("s", "rg", "ws")
SPEC = '{"type": "command", "command": "echo hi", "compute": "cpu"}'


def _jobs_survive_0009(engine: Engine) -> None:
    _upgrade(engine, "0007")
    with engine.begin() as conn:
        _add_workspace(conn)
        for job_id, name, status, submitted, ended in (
            (1, "done", "Completed", 10.0, 20.0),
            (2, "waiting", "Queued", 30.0, None),
        ):
            conn.execute(
                text(
                    "INSERT INTO jobs (id, workspace_id, name, compute_name, spec, status, priority, "
                    "instance_count, attempt, max_attempts, cancel_requested, created_by, submitted_at, "
                    f"ended_at) VALUES (:id, 1, :name, 'cpu', '{SPEC}', :status, 2, 1, 1, 3, false, "
                    "'alice', :submitted, :ended)"
                ),
                {"id": job_id, "name": name, "status": status, "submitted": submitted, "ended": ended},
            )
        conn.execute(
            text(
                "INSERT INTO job_runs (id, job_id, attempt, rank, node_id, state, spec, exit_code, reason, "
                "log_size, assigned_at, started_at, ended_at) VALUES ('r-1', 1, 1, 0, 'n-1', 'exited', "
                "'{}', 0, 'exited', 0, 11.0, 12.0, 20.0)"
            )
        )
    _upgrade(engine, "head")
    assert _differences(engine) == []

    sessions = db.session_factory(engine)
    with sessions() as session:
        workspace = session.get(Workspace, 1)
        assert workspace is not None
        done = job_service.get(session, workspace, "done")
        assert (done.kind, done.parent_job_id, done.status) == ("command", None, "Completed")
        shown = native_jobs.render(done, REF, job_service.runs_of(session, done), "http://x", "")
        assert shown["type"] == "command" and shown["status"] == "Completed"
        assert shown["attempts"][0]["exit_codes"] == [0] and shown["end_time"] is not None
        listed = job_service.list_jobs(session, workspace)
        assert [j.name for j in listed.jobs] == ["waiting", "done"] and listed.next_token is None
        assert [j.name for j in job_service.list_jobs(session, workspace, status="Queued").jobs] == [
            "waiting"
        ]
        # A job made by another names it (what pipeline steps and sweep trials will do).
        child = Job(
            id=3,  # the rows above were inserted with their ids: PostgreSQL's sequence is still at 1
            workspace_id=1,
            name="child",
            compute_name="cpu",
            spec={"type": "command", "command": "echo child"},
            status="Queued",
            parent_job_id=done.id,
            created_by="alice",
            submitted_at=40.0,
        )
        session.add(child)
        session.commit()
        assert (child.kind, child.parent_job_id) == ("command", 1)


def test_sqlite_jobs_from_0007_are_command_jobs_without_a_parent(tmp_path: Path) -> None:
    engine = db.make_engine(db.sqlite_url(tmp_path))
    _jobs_survive_0009(engine)
    engine.dispose()


@pytest.mark.postgres
def test_postgres_jobs_from_0007_are_command_jobs_without_a_parent(postgres_url: str) -> None:
    engine = create_engine(db.normalise_url(postgres_url))
    _jobs_survive_0009(engine)
    engine.dispose()
