"""Migration 0030 (``job_resource_buckets``) on a store holding jobs: they are carried, the table is
made, and the schema at head matches the models (SQLite and PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, inspect

from cloudlet.store import db
from tests.integration.test_migrations import _differences, _upgrade


def _upgraded(engine: Engine) -> None:
    _upgrade(engine, "0029")
    assert "job_resource_buckets" not in inspect(engine).get_table_names()
    _upgrade(engine, "head")
    assert "job_resource_buckets" in inspect(engine).get_table_names()
    assert _differences(engine) == []


def test_sqlite_gets_job_resource_buckets(tmp_path: Path) -> None:
    engine = db.make_engine(db.sqlite_url(tmp_path))
    _upgraded(engine)
    engine.dispose()


@pytest.mark.postgres
def test_postgres_gets_job_resource_buckets(postgres_url: str) -> None:
    engine = create_engine(db.normalise_url(postgres_url))
    _upgraded(engine)
    engine.dispose()
