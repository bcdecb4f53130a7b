"""Migration 0014 (assets and the jobs' uses of them) on a store populated at 0013: the jobs it held
stay, assets and uses can be written beside them, the schema at head matches the models, and a
downgrade removes both tables and leaves the jobs (SQLite and PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, inspect, text

from cloudlet.store import db
from tests.integration.test_migration_0008 import _downgrade
from tests.integration.test_migrations import _add_workspace, _differences, _upgrade

JOB = (
    "INSERT INTO jobs (id, workspace_id, name, compute_name, spec, status, priority, instance_count, "
    "attempt, max_attempts, cancel_requested, created_by, submitted_at) VALUES (1, 1, 'queued', 'cpu', "
    "'{\"command\": \"echo\"}', 'Queued', 2, 1, 0, 3, false, 'alice', 1.0)"
)
ASSET = (
    "INSERT INTO assets (workspace_id, kind, name, version, spec, archived, created_by, created_at, "
    "modified_at) VALUES (1, 'data', 'iris', '1', '{\"type\": \"uri_file\"}', false, 'alice', 2.0, 2.0) "
    "RETURNING id"
)


def _assets_round_trip(engine: Engine) -> None:
    _upgrade(engine, "0013")
    with engine.begin() as conn:
        _add_workspace(conn)
        conn.execute(text(JOB))
    _upgrade(engine, "head")
    assert _differences(engine) == []
    with engine.begin() as conn:
        asset = conn.execute(text(ASSET)).scalar_one()
        conn.execute(
            text(
                "INSERT INTO asset_uses (job_id, role, field, kind, name, version, asset_id) "
                "VALUES (1, 'input', 'inputs.data', 'data', 'iris', '1', :asset)"
            ),
            {"asset": asset},
        )
        uses = conn.execute(
            text(
                "SELECT j.name, a.version FROM asset_uses u JOIN jobs j ON j.id = u.job_id "
                "JOIN assets a ON a.id = u.asset_id"
            )
        ).all()
    assert [tuple(row) for row in uses] == [("queued", "1")]
    # A version is unique per workspace, kind and name.
    with engine.begin() as conn, pytest.raises(Exception, match=r"(?i)unique"), conn.begin_nested():
        conn.execute(text(ASSET))
    _downgrade(engine, "0013")
    tables = set(inspect(engine).get_table_names())
    assert "assets" not in tables and "asset_uses" not in tables
    with engine.connect() as conn:
        assert conn.execute(text("SELECT name, status FROM jobs")).all() == [("queued", "Queued")]


def test_sqlite_assets_upgrade_and_downgrade(tmp_path: Path) -> None:
    engine = db.make_engine(db.sqlite_url(tmp_path))
    _assets_round_trip(engine)
    engine.dispose()


@pytest.mark.postgres
def test_postgres_assets_upgrade_and_downgrade(postgres_url: str) -> None:
    engine = create_engine(db.normalise_url(postgres_url))
    _assets_round_trip(engine)
    engine.dispose()
