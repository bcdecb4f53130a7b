"""Migration 0025 (online_deployments.serving, .autoscaled_instances) on a store populated at
0024: an existing deployment and its metrics are kept, with no serving report and no autoscaled
count yet (its next roll-out starts from instance_count), and the schema at head matches the
models (SQLite and PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text

from cloudlet.store import db
from tests.integration.test_migrations import _add_workspace, _differences, _upgrade


def _rows_carried(engine: Engine) -> None:
    _upgrade(engine, "0024")
    with engine.begin() as conn:
        _add_workspace(conn)
        conn.execute(
            text(
                "INSERT INTO online_endpoints (id, workspace_id, name, spec, primary_key, secondary_key, "
                "provisioning_state, created_by, created_on) VALUES (1, 1, 'ep', '{}', 'k1', 'k2', "
                "'Succeeded', 'a', CURRENT_TIMESTAMP)"
            )
        )
        conn.execute(
            text(
                "INSERT INTO online_deployments (id, endpoint_id, name, spec, provisioning_state, stage, "
                "generation, local, created_by, created_on) VALUES (1, 1, 'blue', '{}', 'Succeeded', "
                "'ready', 3, false, 'a', CURRENT_TIMESTAMP)"
            )
        )
        conn.execute(text("INSERT INTO online_deployment_metrics (deployment_id, requests) VALUES (1, 7)"))
    _upgrade(engine, "head")
    assert _differences(engine) == []
    with engine.connect() as conn:
        row = conn.execute(
            text("SELECT generation, serving, autoscaled_instances FROM online_deployments WHERE id = 1")
        ).one()
        assert tuple(row) == (3, None, None)
        assert conn.execute(text("SELECT requests FROM online_deployment_metrics")).scalar_one() == 7


def test_sqlite_rows_are_carried_to_0025(tmp_path: Path) -> None:
    engine = db.make_engine(db.sqlite_url(tmp_path))
    _rows_carried(engine)
    engine.dispose()


@pytest.mark.postgres
def test_postgres_rows_are_carried_to_0025(postgres_url: str) -> None:
    engine = create_engine(db.normalise_url(postgres_url))
    _rows_carried(engine)
    engine.dispose()
