"""Migration 0012: a compute's id is never given out twice, on a store populated at 0011 (whose
newest compute was deleted, its node still recorded) and on a new store; the schema at head
matches the models (SQLite and PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text

from cloudlet.store import db
from tests.integration.test_migrations import _add_workspace, _differences, _upgrade

COMPUTE = (
    "INSERT INTO computes (workspace_id, name, type, location, size, spec, owner, created_by, "
    "provisioning_state, state, current_node_count, errors, warnings, created_on, last_modified_on) "
    "VALUES (1, :name, 'amlcompute', 'l', 's', '{}', 'a', 'a', 'Succeeded', NULL, 0, '[]', '[]', "
    "CURRENT_TIMESTAMP, CURRENT_TIMESTAMP) RETURNING id"
)
NODE = (
    "INSERT INTO nodes (id, workspace_id, owner_type, owner_id, installation_id, location, provider, "
    "provider_ref, size, family, vcpus, memory_gb, gpus, tier, state, state_since, token_hash, "
    "resources, usage, apps, report, created_at) VALUES ('n-old', 1, 'computes', :owner, 'i', 'l', "
    "'local', '{}', 's', 'f', 1, 1.0, 0, 'dedicated', 'terminating', 1.0, 'h', '{}', '{}', '{}', '{}', 1.0)"
)


def _create_then_delete(engine: Engine, name: str) -> int:
    with engine.begin() as conn:
        made = conn.execute(text(COMPUTE), {"name": name}).scalar_one()
        conn.execute(text("DELETE FROM computes WHERE id = :id"), {"id": made})
    return int(made)


def _ids_are_not_reused(engine: Engine) -> None:
    _upgrade(engine, "0011")
    with engine.begin() as conn:
        _add_workspace(conn)
    with engine.begin() as conn:
        conn.execute(text(COMPUTE), {"name": "keep"})
    gone = _create_then_delete(engine, "gone")  # the newest compute, deleted; its node remains
    with engine.begin() as conn:
        conn.execute(text(NODE), {"owner": gone})
    _upgrade(engine, "head")
    assert _differences(engine) == []
    with engine.begin() as conn:
        after_upgrade = conn.execute(text(COMPUTE), {"name": "new"}).scalar_one()
    assert after_upgrade > gone, "a compute took the id whose node is still recorded"
    again = _create_then_delete(engine, "again")
    with engine.begin() as conn:
        newest = conn.execute(text(COMPUTE), {"name": "newest"}).scalar_one()
    assert newest > again


def test_sqlite_compute_ids_are_not_reused(tmp_path: Path) -> None:
    engine = db.make_engine(db.sqlite_url(tmp_path))
    _ids_are_not_reused(engine)
    engine.dispose()


@pytest.mark.postgres
def test_postgres_compute_ids_are_not_reused(postgres_url: str) -> None:
    engine = create_engine(db.normalise_url(postgres_url))
    _ids_are_not_reused(engine)
    engine.dispose()
