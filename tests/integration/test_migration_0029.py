"""Migration 0029 (the events feed's tables) on a store holding jobs: the tables come empty,
the next event takes seq 1, and the schema at head matches the models (SQLite and PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text

from cloudlet.store import db
from tests.integration.test_migrations import _differences, _upgrade


def _tables_made(engine: Engine) -> None:
    _upgrade(engine, "0028")
    _upgrade(engine, "head")
    assert _differences(engine) == []
    with engine.begin() as conn:
        assert conn.execute(text("SELECT count(*) FROM events")).scalar() == 0
        conn.execute(
            text(
                "INSERT INTO events (at, workspace_id, type, name, to_state) "
                "VALUES (1.0, 1, 'job', 'j', 'Queued')"
            )
        )
        assert conn.execute(text("SELECT seq FROM events")).scalar() == 1
        assert conn.execute(text("SELECT count(*) FROM event_horizon")).scalar() == 0


def test_sqlite_gets_the_events_tables(tmp_path: Path) -> None:
    engine = db.make_engine(db.sqlite_url(tmp_path))
    _tables_made(engine)
    engine.dispose()


@pytest.mark.postgres
def test_postgres_gets_the_events_tables(postgres_url: str) -> None:
    engine = create_engine(db.normalise_url(postgres_url))
    _tables_made(engine)
    engine.dispose()
