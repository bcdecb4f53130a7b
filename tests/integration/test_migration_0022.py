"""Migration 0022 (workspaces.storage_quota_gib) on a store populated at 0021: an existing
workspace keeps the server's default quota, and the schema at head matches the models (SQLite
and PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session

from cloudlet.services.access import workspaces
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.store import db
from cloudlet.store.schema import Workspace
from tests.integration.test_migrations import _add_workspace, _differences, _upgrade


def _rows_carried(engine: Engine) -> None:
    _upgrade(engine, "0021")
    with engine.begin() as conn:
        _add_workspace(conn)
    _upgrade(engine, "head")
    assert _differences(engine) == []
    with Session(engine) as session:
        ws = session.get(Workspace, 1)
        assert ws is not None and ws.storage_quota_gib is None
        assert workspaces.render(ws, WorkspaceRef("s", "rg", "ws"))["storage_quota_gib"] is None


def test_sqlite_rows_are_carried_to_0022(tmp_path: Path) -> None:
    engine = db.make_engine(db.sqlite_url(tmp_path))
    _rows_carried(engine)
    engine.dispose()


@pytest.mark.postgres
def test_postgres_rows_are_carried_to_0022(postgres_url: str) -> None:
    engine = create_engine(db.normalise_url(postgres_url))
    _rows_carried(engine)
    engine.dispose()
