"""``store.db.read_only``: a control loop's look at the store takes no write lock, and its
read-only engine is made once per engine (a fresh one per look cost more CPU than the lock)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import event, text

from cloudlet.store import db


def test_a_look_takes_no_write_lock_and_its_engine_is_made_once(tmp_path: Path) -> None:
    engine = db.make_engine(db.sqlite_url(tmp_path))
    sessions = db.session_factory(engine)
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", seen)
    binds = []
    for _ in range(2):
        with db.read_only(sessions) as reads:
            assert reads.scalar(text("SELECT 1")) == 1
            binds.append(reads.get_bind())
    assert binds[0] is binds[1] is not engine
    assert statements == ["SELECT 1", "SELECT 1"]  # no BEGIN: each SELECT reads the latest commit
    with sessions() as writes:
        writes.scalar(text("SELECT 1"))
    assert "BEGIN IMMEDIATE" in statements  # a writing session still queues for the lock
    engine.dispose()
