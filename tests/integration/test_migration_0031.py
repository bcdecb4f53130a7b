"""Migration 0031 (``notification_deliveries``, the job notifications' outbox): made empty, the
schema at head matches the models, and the downgrade removes it again (SQLite and PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, inspect, text

from cloudlet.store import db
from tests.integration.test_migrations import _differences, _upgrade


def _downgrade(engine: Engine, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(db.MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)


def _outbox_added(engine: Engine) -> None:
    _upgrade(engine, "0030")
    assert "notification_deliveries" not in inspect(engine).get_table_names()
    _upgrade(engine, "head")
    assert _differences(engine) == []
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM notification_deliveries")).scalar() == 0
    _downgrade(engine, "0030")
    assert "notification_deliveries" not in inspect(engine).get_table_names()


def test_sqlite_gets_the_outbox_in_0028(tmp_path: Path) -> None:
    engine = db.make_engine(db.sqlite_url(tmp_path))
    _outbox_added(engine)
    engine.dispose()


@pytest.mark.postgres
def test_postgres_gets_the_outbox_in_0028(postgres_url: str) -> None:
    engine = create_engine(db.normalise_url(postgres_url))
    _outbox_added(engine)
    engine.dispose()
