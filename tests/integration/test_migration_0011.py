"""Migration 0011 (nodes.state_since) on a store populated at 0010: every node gets the time it
entered its state from what the row knew, a terminating node's retries count from the upgrade, and
the schema at head matches the models (SQLite and PostgreSQL)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text

from cloudlet.store import db
from tests.integration.test_migrations import _add_workspace, _differences, _upgrade

# id, state, created_at, registered_at, idle_since, ended_at
ROWS = (
    ("n-req", "requested", 100.0, None, None, None),
    ("n-start", "starting", 110.0, None, None, None),
    ("n-idle", "idle", 120.0, 130.0, 140.0, None),
    ("n-busy", "busy", 150.0, 160.0, None, None),
    ("n-gone", "terminated", 170.0, 180.0, None, 190.0),
    ("n-stuck", "terminating", 200.0, 210.0, None, None),
)


def _state_since_backfilled(engine: Engine) -> None:
    _upgrade(engine, "0010")
    with engine.begin() as conn:
        _add_workspace(conn)
        for node_id, state, created, registered, idle, ended in ROWS:
            conn.execute(
                text(
                    "INSERT INTO nodes (id, workspace_id, owner_type, owner_id, installation_id, location, "
                    "provider, provider_ref, size, family, vcpus, memory_gb, gpus, tier, state, "
                    "token_hash, resources, usage, apps, report, created_at, registered_at, idle_since, "
                    "ended_at) VALUES (:id, 1, 'computes', 1, 'i', 'l', 'local', '{}', 's', 'f', 1, 1.0, 0, "
                    "'dedicated', :state, 'h', '{}', '{}', '{}', '{}', :created, :registered, :idle, :ended)"
                ),
                {
                    "id": node_id,
                    "state": state,
                    "created": created,
                    "registered": registered,
                    "idle": idle,
                    "ended": ended,
                },
            )
    before = time.time()
    _upgrade(engine, "head")
    with engine.connect() as conn:
        since = dict(conn.execute(text("SELECT id, state_since FROM nodes")).all())
    assert since["n-req"] == 100.0 and since["n-start"] == 110.0
    assert since["n-idle"] == 140.0 and since["n-busy"] == 160.0 and since["n-gone"] == 190.0
    assert since["n-stuck"] >= before - 1.0
    assert _differences(engine) == []


def test_sqlite_nodes_get_their_state_since(tmp_path: Path) -> None:
    engine = db.make_engine(db.sqlite_url(tmp_path))
    _state_since_backfilled(engine)
    engine.dispose()


@pytest.mark.postgres
def test_postgres_nodes_get_their_state_since(postgres_url: str) -> None:
    engine = create_engine(db.normalise_url(postgres_url))
    _state_since_backfilled(engine)
    engine.dispose()
