"""The API requests' warm read sessions (``store.db.WarmReads``) on a real store, SQLite and
PostgreSQL: a released session keeps its connection but nothing of its request (identity map,
``session.info``), holds no transaction or snapshot between requests (a WAL checkpoint completes
while it is idle; PostgreSQL shows the connection idle, not idle in transaction), reads what was
committed after it was last used, and there are never more warm sessions than allowed: the
requests beyond them get fresh sessions, as before."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from cloudlet.services.core.clock import utcnow
from cloudlet.store import db
from cloudlet.store.schema import ResourceGroup, Subscription, Workspace


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engines(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[db.Engines]:
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else db.sqlite_url(tmp_path)
    engines = db.open_engines(url, db.StoreLimits(warm_reads=2))
    db.migrate(engines.control)
    with db.session_factory(engines.control)() as session, session.begin():
        session.add(Subscription(id="s", display_name="s"))
        session.flush()
        session.add(ResourceGroup(id=1, subscription_id="s", name="rg", location="l"))
        session.flush()
        workspace = Workspace(id=1, resource_group_id=1, name="ws", location="l", created_on=utcnow())
        workspace.tags = {}
        session.add(workspace)
    yield engines
    for engine in (engines.api, engines.control, engines.reads):
        engine.dispose()


def _warm(engines: db.Engines, size: int = 2) -> db.WarmReads:
    return db.WarmReads(engines.reads, db.read_session_factory(engines.api), size)


def _description(session: Session) -> str | None:
    return session.scalar(select(Workspace.description).where(Workspace.id == 1))


def _set_description(engines: db.Engines, value: str) -> None:
    with db.session_factory(engines.api)() as session, session.begin():
        workspace = session.get(Workspace, 1)
        assert workspace is not None
        workspace.description = value


def test_a_released_session_is_reused_empty_and_reads_the_latest_commit(engines: db.Engines) -> None:
    warm = _warm(engines)
    first = warm.lease()
    workspace = first.scalar(select(Workspace))
    assert workspace is not None and _description(first) is None
    first.info["memo"] = "this request's"
    connection = first.connection()
    warm.release(first)

    _set_description(engines, "changed between requests")
    again = warm.lease()
    assert again is first and again.connection() is connection  # the same session, kept warm
    assert workspace not in again and len(again.identity_map) == 0
    assert "memo" not in again.info
    assert _description(again) == "changed between requests"
    fresh = again.get(Workspace, 1)
    assert fresh is not None and fresh is not workspace
    warm.release(again)


def test_an_idle_warm_session_holds_no_transaction(engines: db.Engines) -> None:
    warm = _warm(engines)
    session = warm.lease()
    assert _description(session) is None
    driver = session.connection().connection.driver_connection
    warm.release(session)
    _set_description(engines, "written while the reader is idle")  # WAL frames to checkpoint
    if engines.reads.dialect.name == "sqlite":
        assert not driver.in_transaction
        path = db.sqlite_path(str(engines.reads.url))
        with sqlite3.connect(str(path)) as other:
            busy, frames, done = other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0 and frames == done, (busy, frames, done)
    else:
        with engines.control.connect() as other:
            states = other.execute(
                text("SELECT state FROM pg_stat_activity WHERE pid = :pid"), {"pid": driver.info.backend_pid}
            ).scalars()
            assert list(states) == ["idle"]


def test_no_more_warm_sessions_than_allowed_and_the_rest_are_fresh(engines: db.Engines) -> None:
    warm = _warm(engines, size=1)
    kept, beyond = warm.lease(), warm.lease()
    assert kept.info.get("cloudlet_warm") and not beyond.info.get("cloudlet_warm")
    assert _description(kept) is None and _description(beyond) is None
    beyond_connection = beyond.connection()
    warm.release(beyond)
    assert beyond_connection.closed  # a fresh session's connection goes back to the API's pool
    warm.release(kept)
    assert warm.lease() is kept


def test_a_session_idle_too_long_takes_its_connection_again(
    engines: db.Engines, monkeypatch: pytest.MonkeyPatch
) -> None:
    warm = _warm(engines)
    session = warm.lease()
    connection = session.connection()
    warm.release(session)
    monkeypatch.setattr(db.WarmReads, "MAX_IDLE_S", 0.0)
    again = warm.lease()
    assert again is not session and again.info.get("cloudlet_warm")
    assert connection.closed  # given back to its pool, whose pre-ping (PostgreSQL) checks it
    assert _description(again) is None
    warm.release(again)
