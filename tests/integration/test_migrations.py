"""Migrations match the schema: upgrading an empty store to head leaves nothing for Alembic's
autogenerate to add (SQLite and PostgreSQL), and 0003 gives existing node rows empty ``apps``."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy import Connection, Engine, create_engine, text

from cloudlet.store import db
from cloudlet.store.schema import OPTIONAL_INDEXES, Base


def _differences(engine: Engine) -> list[object]:
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"include_object": _modelled})
        return list(compare_metadata(context, Base.metadata))


def _modelled(obj: object, name: str | None, type_: str, reflected: bool, compare_to: object) -> bool:
    # An index a migration makes only where the store can (schema.OPTIONAL_INDEXES) is no difference.
    return not (type_ == "index" and name in OPTIONAL_INDEXES)


def _upgrade(engine: Engine, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(db.MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def _add_workspace(conn: Connection) -> None:
    """Subscription 's', resource group 1 and workspace 1 ('ws', location 'l'): what most rows need."""
    conn.execute(text("INSERT INTO subscriptions (id, display_name) VALUES ('s', 's')"))
    conn.execute(
        text("INSERT INTO resource_groups (id, subscription_id, name, location) VALUES (1, 's', 'rg', 'l')")
    )
    conn.execute(
        text(
            "INSERT INTO workspaces (id, resource_group_id, name, location, tags, created_on) "
            "VALUES (1, 1, 'ws', 'l', '{}', CURRENT_TIMESTAMP)"
        )
    )


def _node_row_survives_0003(engine: Engine) -> None:
    _upgrade(engine, "0002")
    with engine.begin() as conn:
        _add_workspace(conn)
        conn.execute(
            text(
                "INSERT INTO nodes (id, workspace_id, compute_name, installation_id, location, provider, "
                "provider_ref, size, family, vcpus, memory_gb, gpus, tier, state, token_hash, resources, "
                "usage, created_at) VALUES ('n-1', 1, 'c', 'i', 'l', 'local', '{}', 's', 'f', 1, 1.0, 0, "
                "'dedicated', 'idle', 'h', '{}', '{}', 0)"
            )
        )
    _upgrade(engine, "head")
    with engine.connect() as conn:
        apps, op = conn.execute(text("SELECT apps, operation_id FROM nodes WHERE id = 'n-1'")).one()
    assert apps in ({}, "{}") and op is None
    assert _differences(engine) == []


def test_sqlite_head_matches_the_schema(tmp_path: Path) -> None:
    engine = db.make_engine(db.sqlite_url(tmp_path))
    _node_row_survives_0003(engine)
    engine.dispose()


@pytest.mark.postgres
def test_postgres_head_matches_the_schema(postgres_url: str) -> None:
    engine = create_engine(db.normalise_url(postgres_url))
    _node_row_survives_0003(engine)
    engine.dispose()
