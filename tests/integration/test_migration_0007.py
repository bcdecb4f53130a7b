"""Migration 0007 (revocable access, the audit log) on a store populated at 0006: the keys it held
still authenticate (and a revoked one stays revoked), the user stays enabled, and the schema at
head matches the models (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text

from cloudlet.domain.errors import CloudletError
from cloudlet.services.access import api_keys, identity
from cloudlet.store import db
from cloudlet.store.schema import ApiKey, AuditEntry, Principal
from tests.integration.test_migrations import _differences, _upgrade

KEY = "clk_" + "k" * 40
REVOKED_KEY = "clk_" + "r" * 40
SECRET = "s" * 64


@pytest.fixture(autouse=True)
def fresh_caller_cache() -> Iterator[None]:
    identity.forget_callers()
    yield
    identity.forget_callers()


def _keys_survive_0007(engine: Engine) -> None:
    _upgrade(engine, "0006")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO installation (id, token_secret, created_on) VALUES ('i', :s, CURRENT_TIMESTAMP)"
            ),
            {"s": SECRET},
        )
        conn.execute(
            text(
                "INSERT INTO principals (id, name, is_admin, created_on) "
                "VALUES (7, 'alice', false, CURRENT_TIMESTAMP)"
            )
        )
        for key_id, key, revoked in (("k-live", KEY, False), ("k-dead", REVOKED_KEY, True)):
            conn.execute(
                text(
                    "INSERT INTO api_keys (id, principal_id, key_hash, prefix, created_on, revoked) "
                    "VALUES (:id, 7, :hash, :prefix, CURRENT_TIMESTAMP, :revoked)"
                ),
                {"id": key_id, "hash": identity.hash_key(key), "prefix": key[:8], "revoked": revoked},
            )
    _upgrade(engine, "head")
    assert _differences(engine) == []

    sessions = db.session_factory(engine)
    with sessions() as session:
        caller = identity.authenticate(session, KEY, SECRET)
        assert (caller.name, caller.key_id, caller.is_admin) == ("alice", "k-live", False)
        token, _ = identity.mint_for(session, caller, SECRET)
        assert identity.authenticate(session, token, SECRET).key_id == "k-live"
        with pytest.raises(CloudletError) as refused:
            identity.authenticate(session, REVOKED_KEY, SECRET)
        assert refused.value.status == 401 and refused.value.details[0]["code"] == "KeyRevoked"
        session.commit()  # the live key's first use since the upgrade

    with sessions() as session:
        alice = session.get(Principal, 7)
        assert alice is not None and alice.disabled_on is None
        live = session.get(ApiKey, "k-live")
        assert live is not None and live.expires_on is None and live.revoked_on is None
        assert live.last_used_on is not None
        assert api_keys.state(live) == "Active"
        dead = session.get(ApiKey, "k-dead")
        assert dead is not None and api_keys.state(dead) == "Revoked"
        assert session.query(AuditEntry).count() == 0


def test_sqlite_keys_from_0006_still_authenticate(tmp_path: Path) -> None:
    engine = db.make_engine(db.sqlite_url(tmp_path))
    _keys_survive_0007(engine)
    engine.dispose()


@pytest.mark.postgres
def test_postgres_keys_from_0006_still_authenticate(postgres_url: str) -> None:
    engine = create_engine(db.normalise_url(postgres_url))
    _keys_survive_0007(engine)
    engine.dispose()
