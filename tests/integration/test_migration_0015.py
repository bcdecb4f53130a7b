"""Migration 0015: the code_versions table, on a store populated at 0012 (its workspace and code
snapshot rows carry over), matching the models at head, and gone again on downgrade (SQLite and
PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, inspect, text
from sqlalchemy.exc import IntegrityError

from cloudlet.store import db
from tests.integration.test_migrations import _add_workspace, _differences, _upgrade

VERSION = (
    "INSERT INTO code_versions (workspace_id, name, version, code_uri, hash_sha256, hash_version, "
    "snapshot, is_anonymous, tags, created_by, created_on) VALUES (1, 'c', '1', 'azureml://x', :h, "
    "'202208', :h, true, '{}', 'a', CURRENT_TIMESTAMP)"
)


def _downgrade(engine: Engine, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(db.MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)


def _code_versions_come_and_go(engine: Engine) -> None:
    _upgrade(engine, "0012")
    with engine.begin() as conn:
        _add_workspace(conn)
        conn.execute(
            text(
                "INSERT INTO code_assets (workspace_id, hash, size, created_on) "
                "VALUES (1, :h, 3, CURRENT_TIMESTAMP)"
            ),
            {"h": "a" * 64},
        )
    _upgrade(engine, "head")
    assert _differences(engine) == []
    with engine.begin() as conn:
        conn.execute(text(VERSION), {"h": "a" * 64})
        assert conn.execute(text("SELECT count(*) FROM code_assets")).scalar_one() == 1
        with pytest.raises(IntegrityError), conn.begin_nested():
            conn.execute(text(VERSION), {"h": "a" * 64})
    _downgrade(engine, "0012")
    assert "code_versions" not in inspect(engine).get_table_names()
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM code_assets")).scalar_one() == 1


def test_sqlite_code_versions(tmp_path: Path) -> None:
    engine = db.make_engine(db.sqlite_url(tmp_path))
    _code_versions_come_and_go(engine)
    engine.dispose()


@pytest.mark.postgres
def test_postgres_code_versions(postgres_url: str) -> None:
    engine = create_engine(db.normalise_url(postgres_url))
    _code_versions_come_and_go(engine)
    engine.dispose()
