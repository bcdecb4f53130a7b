"""Migration 0010 (locations name a provider configuration; nodes name their location's provider)
on a store populated at 0007: the bootstrapped ``local`` location keeps working with its provider's
defaults, a node recorded with its provider kind still finds its provider, a node may now record a
64-character location name, and the schema at head matches the models (SQLite and PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text

from cloudlet.providers.local import LocalProvider
from cloudlet.providers.provider_set import ProviderSet
from cloudlet.providers.registry import REGISTRY, ProviderContext
from cloudlet.services.compute import locations
from cloudlet.store import db
from cloudlet.store.schema import Location, Node
from tests.integration.test_migrations import _differences, _upgrade

LONG_LOCATION = "l" + "-long" * 12 + "xyz"  # 64 characters


def _locations_survive_0010(engine: Engine, home: Path) -> None:
    _upgrade(engine, "0007")
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO locations (name, provider, capacity) VALUES ('local', 'local', :c)"),
            {"c": '{"vcpus": 64, "memory_gb": 256, "gpus": 0, "overcommit": 8.0}'},
        )
        conn.execute(text("INSERT INTO subscriptions (id, display_name) VALUES ('s', 's')"))
        conn.execute(
            text(
                "INSERT INTO resource_groups (id, subscription_id, name, location) "
                "VALUES (1, 's', 'rg', 'local')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO workspaces (id, resource_group_id, name, location, tags, created_on) "
                "VALUES (1, 1, 'ws', 'local', '{}', CURRENT_TIMESTAMP)"
            )
        )
        conn.execute(
            text(
                "INSERT INTO nodes (id, workspace_id, compute_name, installation_id, location, provider, "
                "provider_ref, size, family, vcpus, memory_gb, gpus, tier, state, token_hash, resources, "
                "usage, apps, report, created_at) VALUES ('n-old', 1, 'c', 'i', 'local', 'local', '{}', "
                "'s', 'f', 1, 1.0, 0, 'dedicated', 'idle', 'h', '{}', '{}', '{}', '{}', 0)"
            )
        )
    _upgrade(engine, "head")
    assert _differences(engine) == []

    sessions = db.session_factory(engine)
    with sessions.begin() as session:
        local = session.get(Location, "local")
        assert local is not None and local.config == {} and local.capacity["vcpus"] == 64
        assert locations.render(local)["config"] == {}
        old = session.get(Node, "n-old")
        assert old is not None and old.provider == "local"
        old.location = old.provider = LONG_LOCATION  # fits now (was 32 characters)

    def load() -> list[locations.LocationProvider]:
        with sessions() as session:
            return locations.provider_settings(session)

    providers = ProviderSet(REGISTRY, ProviderContext(home), load)
    assert list(providers) == ["local"]
    provider = providers["local"]
    assert isinstance(provider, LocalProvider) and provider.root == home / "nodes"
    with sessions() as session:
        node = session.get(Node, "n-old")
        assert node is not None and node.provider == LONG_LOCATION


def test_sqlite_local_location_from_0007_keeps_working(tmp_path: Path) -> None:
    engine = db.make_engine(db.sqlite_url(tmp_path))
    _locations_survive_0010(engine, tmp_path)
    engine.dispose()


@pytest.mark.postgres
def test_postgres_local_location_from_0007_keeps_working(postgres_url: str, tmp_path: Path) -> None:
    engine = create_engine(db.normalise_url(postgres_url))
    _locations_survive_0010(engine, tmp_path)
    engine.dispose()
