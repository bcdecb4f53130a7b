"""Migration 0026 (the job list's indexes and ``jobs.display_name``) on a store holding jobs: an
existing job's display name is copied out of its document, and the job list's pages read their
index in order (EXPLAIN on SQLite and PostgreSQL, over enough jobs that a planner would rather
sort than walk an index it did not need)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, insert, text
from sqlalchemy.orm import Session

from cloudlet.services.jobs import job_search
from cloudlet.services.jobs.job_search import JobQuery
from cloudlet.store import db
from cloudlet.store.schema import Job, Workspace
from tests.integration.test_migrations import _add_workspace, _differences, _upgrade

JOBS = 20_000
# Each query, and the indexes its first page may be read through (with no child jobs in the
# store, PostgreSQL reads the top-level list through either of the two in submission order).
PAGES = {
    "first page": (JobQuery(), ("ix_jobs_list_top", "ix_jobs_list_all")),
    "status": (JobQuery(statuses=("Failed",)), ("ix_jobs_list_status",)),
    "compute": (JobQuery(computes=("c3",)), ("ix_jobs_list_compute",)),
    "submitter": (JobQuery(created_by=("u3",)), ("ix_jobs_list_creator",)),
    "with children": (JobQuery(include_children=True), ("ix_jobs_list_all",)),
}
# SQLite reads the duration sort through its expression index; PostgreSQL did not match 0026's
# (it sorted the workspace's top-level jobs): 0027 changed the index (test_migration_0027.py).
SQLITE_PAGES = {"by duration": (JobQuery(sort="duration"), ("ix_jobs_list_duration",))}


def _migrated_with_jobs(engine: Engine) -> None:
    _upgrade(engine, "0025")
    with engine.begin() as conn:
        _add_workspace(conn)
        doc = json.dumps({"command": "true", "display_name": "Old Job"})
        conn.execute(
            text(
                "INSERT INTO jobs (workspace_id, name, spec, kind, status, priority, instance_count, "
                "attempt, max_attempts, cancel_requested, created_by, submitted_at) "
                "VALUES (1, 'old', :doc, 'command', 'Completed', 2, 1, 1, 3, false, 'u', 1.0)"
            ),
            {"doc": doc},
        )
    _upgrade(engine, "head")
    assert _differences(engine) == []
    with engine.connect() as conn:
        assert conn.execute(text("SELECT display_name FROM jobs WHERE name = 'old'")).scalar() == "Old Job"


def _fill(engine: Engine) -> None:
    statuses = ["Completed", "Failed", "Queued", "Running", "Canceled"]
    rows = [
        {
            "workspace_id": 1,
            "name": f"j{i}",
            "spec": {"command": "true", "display_name": f"job {i}"},
            "kind": "command",
            "status": statuses[i % 5],
            "compute_name": f"c{i % 10}",
            "created_by": f"u{i % 20}",
            "priority": 2,
            "instance_count": 1,
            "attempt": 0,
            "max_attempts": 3,
            "cancel_requested": False,
            "submitted_at": 1000.0 + i,
        }
        for i in range(JOBS)
    ]
    with Session(engine) as session, session.begin():
        session.execute(insert(Job), rows)
    with engine.begin() as conn:
        conn.execute(text("ANALYZE"))


def _plan(session: Session, query: JobQuery) -> str:
    ws = session.get(Workspace, 1)
    assert ws is not None
    statement = job_search.page_statement(session, ws, query)
    compiled = statement.compile(session.get_bind(), compile_kwargs={"literal_binds": True})
    explain = "EXPLAIN QUERY PLAN" if session.get_bind().dialect.name == "sqlite" else "EXPLAIN"
    return "\n".join(str(row[-1]) for row in session.execute(text(f"{explain} {compiled}")))


def _pages_read_their_index(engine: Engine) -> None:
    _fill(engine)
    with Session(engine) as session:
        sqlite = engine.dialect.name == "sqlite"
        for label, (query, indexes) in {**PAGES, **(SQLITE_PAGES if sqlite else {})}.items():
            plan = _plan(session, query)
            assert any(index in plan for index in indexes), (label, plan)
            assert "TEMP B-TREE" not in plan and "Sort" not in plan, (label, plan)
        ws = session.get(Workspace, 1)
        assert ws is not None
        page = job_search.search_jobs(session, ws, JobQuery(text="JOB 1999", top=5))
        assert [row.name for row in page.jobs] == ["j19999", "j19998", "j19997", "j19996", "j19995"]


def test_sqlite_display_names_are_carried_and_pages_use_their_index(tmp_path: Path) -> None:
    engine = db.make_engine(db.sqlite_url(tmp_path))
    _migrated_with_jobs(engine)
    _pages_read_their_index(engine)
    engine.dispose()


@pytest.mark.postgres
def test_postgres_display_names_are_carried_and_pages_use_their_index(postgres_url: str) -> None:
    engine = create_engine(db.normalise_url(postgres_url))
    _migrated_with_jobs(engine)
    _pages_read_their_index(engine)
    engine.dispose()
