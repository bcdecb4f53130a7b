"""Migration 0028 (the job list's filtered pages at 100,000 jobs) on a store holding jobs: the
duration sort reads its index in order on both stores (PostgreSQL sorted before), a status page's
count reads only its index, a name search's page and count come from one walk, and on PostgreSQL
the trigram index exists and the search's statement carries its pattern and bounds (so a generic
plan sees them). ``online_deployments.demand_until`` is there (the schema comparison). Down again:
the 0026 indexes are back, without the trigram index or the column."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, inspect, text
from sqlalchemy.orm import Session

from cloudlet.services.jobs import job_search
from cloudlet.services.jobs.job_search import JobQuery
from cloudlet.store import db
from cloudlet.store.schema import Workspace
from tests.integration.test_migration_0026 import JOBS, _fill, _plan
from tests.integration.test_migrations import _add_workspace, _differences, _upgrade


def _statements(engine: Engine, session: Session, query: JobQuery) -> list[tuple[str, object]]:
    """The statements (and parameters) one search sends, as the driver got them."""
    from sqlalchemy import event

    sent: list[tuple[str, object]] = []

    def record(_conn: object, _cursor: object, statement: str, params: object, *_: object) -> None:
        sent.append((statement, params))

    event.listen(engine, "before_cursor_execute", record)
    try:
        ws = session.get(Workspace, 1)
        assert ws is not None
        job_search.search_jobs(session, ws, query)
    finally:
        event.remove(engine, "before_cursor_execute", record)
    return sent


def _downgraded(engine: Engine) -> None:
    config = Config()
    config.set_main_option("script_location", str(db.MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "0027")
    indexes = {
        ix["name"]: ix for ix in inspect(engine).get_indexes("jobs") if ix["name"] != "ix_jobs_list_duration"
    }
    assert "ix_jobs_name_trgm" not in indexes
    assert "demand_until" not in {c["name"] for c in inspect(engine).get_columns("online_deployments")}
    assert indexes["ix_jobs_list_status"]["column_names"] == ["workspace_id", "status", "submitted_at", "id"]
    definition = (  # an expression index: read its definition (SQLite's inspector skips it)
        "SELECT sql FROM sqlite_master WHERE name = 'ix_jobs_list_duration'"
        if engine.dialect.name == "sqlite"
        else "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_jobs_list_duration'"
    )
    with engine.connect() as conn:
        assert "parent_job_id" in conn.execute(text(definition)).scalar_one()


def _migrated_from_0027_with_a_job(engine: Engine) -> None:
    # Not 0026's own fixture: its update of a stored job before it makes its indexes leaves
    # PostgreSQL's indexes unusable (pg_index.indcheckxmin) to a snapshot older than they are,
    # which another session of a shared server can make any query's for a while.
    _upgrade(engine, "0027")
    with engine.begin() as conn:
        _add_workspace(conn)
        conn.execute(
            text(
                "INSERT INTO jobs (workspace_id, name, spec, kind, status, priority, instance_count, "
                "attempt, max_attempts, cancel_requested, created_by, submitted_at) "
                "VALUES (1, 'old', '{}', 'command', 'Completed', 2, 1, 1, 3, false, 'u', 1.0)"
            )
        )
    _upgrade(engine, "head")
    assert _differences(engine) == []


def _pages_within_their_index(engine: Engine) -> None:
    _migrated_from_0027_with_a_job(engine)  # compares head with the model
    _fill(engine)
    postgres = engine.dialect.name == "postgresql"
    with Session(engine) as session:
        for query in (JobQuery(sort="duration"), JobQuery(sort="duration", statuses=("Failed",))):
            plan = _plan(session, query)
            assert "ix_jobs_list_duration" in plan and "TEMP B-TREE" not in plan and "Sort" not in plan, plan
        ws = session.get(Workspace, 1)
        assert ws is not None
        page = job_search.search_jobs(session, ws, JobQuery(statuses=("Failed",), count=True))
        assert page.count == JOBS // 5 and not page.count_capped
        if not postgres:  # the count tests "top-level" in the status index, not in each row
            count_plan = session.execute(
                text(
                    "EXPLAIN QUERY PLAN SELECT count(*) FROM jobs WHERE workspace_id = 1 "
                    "AND parent_job_id IS NULL AND status = 'Failed'"
                )
            ).all()
            assert "COVERING INDEX ix_jobs_list_status" in str(count_plan[-1][-1]), count_plan
        # A rare name, a quote and the LIKE wildcards: the page, its count, nothing injected.
        found = job_search.search_jobs(session, ws, JobQuery(text="job 1999", count=True, top=5))
        assert [row.name for row in found.jobs] == ["j19999", "j19998", "j19997", "j19996", "j19995"]
        assert found.count == 11 and found.next_token is not None
        for odd in ("it's", "%", "_", "a'; DROP TABLE jobs; --"):
            assert job_search.search_jobs(session, ws, JobQuery(text=odd, count=True)).count == 0
        if postgres:
            _name_search_sees_its_pattern(engine, session)
    _downgraded(engine)


def _name_search_sees_its_pattern(engine: Engine, session: Session) -> None:
    """psycopg prepares a statement it has run 5 times, and PostgreSQL may then keep a generic
    plan: one that cannot see a bound pattern or bound limits guessed a small limit and walked the
    workspace in order (200 ms at 100,000 jobs). The pattern and the bounds are in the statement,
    so every plan sees them (at 100,000 jobs: the trigram index, 1 ms; over this test's 20,000
    small rows PostgreSQL rightly scans, so the plan itself is read at the benchmark's scale)."""
    assert "ix_jobs_name_trgm" in inspect(engine).get_indexes("jobs").__repr__()
    query = JobQuery(text="J1999", count=True, top=5)
    for _ in range(12):
        statements = _statements(engine, session, query)
    searched = [(statement, params) for statement, params in statements if "ILIKE" in statement]
    assert len(searched) == 2  # the page, and the count going on from its last row
    for statement, params in searched:
        assert "%%J1999%%" in statement and "LIMIT" in statement, statement
        assert isinstance(params, dict), params
        assert "%J1999%" not in params.values(), params
    assert "LIMIT 6" in searched[0][0] and f"LIMIT {job_search.COUNT_CAP - 6 + 1}" in searched[1][0]


def test_sqlite_filtered_pages_read_their_indexes(tmp_path: Path) -> None:
    engine = db.make_engine(db.sqlite_url(tmp_path))
    _pages_within_their_index(engine)
    engine.dispose()


@pytest.mark.postgres
def test_postgres_filtered_pages_read_their_indexes(postgres_url: str) -> None:
    engine = create_engine(db.normalise_url(postgres_url))
    _pages_within_their_index(engine)
    engine.dispose()
