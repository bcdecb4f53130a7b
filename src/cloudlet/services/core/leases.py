"""Named leases with fencing tokens, for work that one replica at a time should do."""

from __future__ import annotations

import time

from sqlalchemy import bindparam, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.store import db
from cloudlet.store.schema import Lease

_HOLDER = select(Lease.owner, Lease.expires_at).where(Lease.name == bindparam("name"))


def acquire(sessions: sessionmaker[Session], name: str, owner: str, ttl_s: float) -> int | None:
    """Take or renew the lease; return its fencing token, or None if another replica holds it."""
    now = time.time()
    if _held_by_another(sessions, name, owner, now):
        return None
    with sessions.begin() as session:
        row = session.scalar(select(Lease).where(Lease.name == name))
        if row is None:
            try:
                with session.begin_nested():
                    session.add(Lease(name=name, owner=owner, expires_at=now + ttl_s, token=1))
                return 1
            except IntegrityError:
                return None
        if row.owner == owner and row.expires_at >= now:
            row.expires_at = now + ttl_s
            return row.token
        # Read before the UPDATE: the ORM brings the loaded row up to date with it, and a token
        # read after would be one ahead of the stored one (the holder's next re-assertion fails).
        seen = row.token
        result = session.execute(
            update(Lease)
            .where(
                Lease.name == name,
                Lease.token == seen,
                or_(Lease.owner.is_(None), Lease.expires_at < now, Lease.owner == owner),
            )
            .values(owner=owner, expires_at=now + ttl_s, token=seen + 1)
        )
        return seen + 1 if result.rowcount == 1 else None  # type: ignore[attr-defined]


def _held_by_another(sessions: sessionmaker[Session], name: str, owner: str, now: float) -> bool:
    """Whether another replica holds the lease and it has not lapsed, read without a write
    transaction: every worker that does not lead a loop tries its leases at each of its passes,
    and a try that must fail would otherwise take the store's write lock (on SQLite, across the
    server's workers: the dispatch batcher of the leading worker waited behind it)."""
    with db.read_only(sessions) as reads:
        row = reads.execute(_HOLDER, {"name": name}).first()
    return row is not None and row.owner not in (None, owner) and row.expires_at >= now


def still_held(session: Session, name: str, owner: str, token: int) -> bool:
    """Re-assert inside a writing transaction: true only if nobody took the lease since."""
    result = session.execute(
        update(Lease)
        .where(Lease.name == name, Lease.owner == owner, Lease.token == token)
        .values(expires_at=Lease.expires_at)
    )
    return result.rowcount == 1  # type: ignore[attr-defined]
