"""Migration 0027 (``audit_log.channel``) on a store holding audit entries: an existing entry is
kept with no channel (it predates them), and the schema at head matches the models (SQLite and
PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text

from cloudlet.store import db
from tests.integration.test_migrations import _differences, _upgrade


def _entries_carried(engine: Engine) -> None:
    _upgrade(engine, "0026")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO audit_log (at, actor, action, target, details, request_id) "
                "VALUES (CURRENT_TIMESTAMP, 'admin', 'principal.create', '/principals/a', '{}', 'r1')"
            )
        )
    _upgrade(engine, "head")
    assert _differences(engine) == []
    with engine.connect() as conn:
        row = conn.execute(text("SELECT actor, request_id, channel FROM audit_log")).one()
        assert tuple(row) == ("admin", "r1", None)


def test_sqlite_entries_are_carried_to_0027(tmp_path: Path) -> None:
    engine = db.make_engine(db.sqlite_url(tmp_path))
    _entries_carried(engine)
    engine.dispose()


@pytest.mark.postgres
def test_postgres_entries_are_carried_to_0027(postgres_url: str) -> None:
    engine = create_engine(db.normalise_url(postgres_url))
    _entries_carried(engine)
    engine.dispose()
