"""SSH host keys in the store (``ssh_host_keys``): learned on first use, compared afterwards
(``domain/compute/host_keys.py`` decides), accepted anew by an operator.

``HostKeyBook`` is what an SSH provider is given (``ProviderContext.host_keys``): it looks a host's
recorded key up, records a first key, and notes a refused (changed) key, each in a short
transaction of its own; the provider calls it from its own thread, never inside a step's
transaction. ``accept`` (``cloudlet location update --accept-host-key ADDRESS[:PORT]``) makes the
refused key the recorded one (or, with none refused, forgets the record, so the next connection
learns the key then presented); ``forget_scope`` drops a detached VM's or deleted location's keys.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.domain.compute import host_keys as rules
from cloudlet.domain.errors import validation_error
from cloudlet.services.access import audit
from cloudlet.store.schema import Location, SshHostKey


class HostKeyBook:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        reads: sessionmaker[Session] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``reads``: read-only sessions (no write lock: a lookup made while a step's transaction
        holds SQLite's write lock, e.g. for a node's log, does not wait for it)."""
        self.sessions, self.reads, self.clock = sessions, reads or sessions, clock

    def lookup(self, scope: str, address: str, port: int) -> tuple[str, str] | None:
        """The recorded key and when it was first seen (ISO), or None."""
        with self.reads() as session:
            row = _row(session, scope, address, port)
            return (row.key, _iso(row.first_seen)) if row is not None else None

    def record(self, scope: str, address: str, port: int, key: str) -> None:
        """Trust on first use: keep ``key`` unless a key is recorded already."""
        with self.sessions.begin() as session:
            remember(session, scope, address, port, key, self.clock())

    def refused(self, scope: str, address: str, port: int, key: str) -> None:
        """Note the changed key a host presented (shown by ``location show``, taken by accept)."""
        with self.sessions.begin() as session:
            row = _row(session, scope, address, port)
            if row is not None:
                row.refused_key, row.refused_at = rules.normalize(key), self.clock()


def remember(session: Session, scope: str, address: str, port: int, key: str, now: float) -> None:
    """Record ``key`` for the host unless one is recorded (in the caller's transaction)."""
    key = rules.normalize(key)
    if _row(session, scope, address, port) is None:
        row = SshHostKey(scope=scope, address=address, port=port, key_type=key.split()[0])
        row.key, row.first_seen = key, now
        session.add(row)
        session.flush()


def _row(session: Session, scope: str, address: str, port: int) -> SshHostKey | None:
    return session.scalar(
        select(SshHostKey).where(
            SshHostKey.scope == scope, SshHostKey.address == address, SshHostKey.port == port
        )
    )


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def parse_target(text: str, field: str = "accept_host_keys") -> tuple[str, int | None]:
    """``ADDRESS[:PORT]`` (``[v6]:PORT`` for IPv6); a 400 naming ``field`` when malformed."""
    value = text.strip()
    if value.startswith("["):
        address, _, rest = value[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    elif value.count(":") == 1:
        address, port_text = value.split(":")
    else:
        address, port_text = value, ""
    if not address or (port_text and not port_text.isdigit()) or not 0 < int(port_text or 22) < 65536:
        raise validation_error(field, f"'{text}' is not ADDRESS or ADDRESS:PORT (e.g. 10.0.0.11:22)")
    return address, int(port_text) if port_text else None


def accept(session: Session, scope: str, targets: list[str]) -> list[dict[str, Any]]:
    """Accept a host's new key: the refused one becomes the recorded one (none refused: the record
    is forgotten and the next connection learns the key). 400 naming ``accept_host_keys`` when
    the location has no recorded key for a target."""
    done = []
    for text in targets:
        address, port = parse_target(text)
        query = select(SshHostKey).where(SshHostKey.scope == scope, SshHostKey.address == address)
        rows = list(session.scalars(query if port is None else query.where(SshHostKey.port == port)))
        if not rows:
            raise validation_error(
                "accept_host_keys",
                f"location '{scope}' has no recorded SSH host key for {text}; see `cloudlet location "
                f"show -n {scope}` (host_keys) for its hosts",
            )
        for row in rows:
            if row.refused_key:
                row.key, row.key_type = row.refused_key, row.refused_key.split()[0]
                row.first_seen, row.refused_key, row.refused_at = time.time(), None, None
                done.append({"address": row.address, "port": row.port, "accepted": rules.describe(row.key)})
            else:
                session.delete(row)
                done.append({"address": row.address, "port": row.port, "accepted": "the next key presented"})
    return done


def accept_for_location(session: Session, row: Location, targets: list[str], actor: str) -> None:
    """``PUT /locations/{name}`` with ``accept_host_keys``: accept, audited (admin, checked by the
    route); a 400 naming the field for a location that is not an SSH location."""
    if row.provider != "ssh":
        message = f"location '{row.name}' is not an SSH location (provider: ssh)"
        raise validation_error("accept_host_keys", message)
    accepted = accept(session, row.name, targets)
    target = f"/locations/{row.name}"
    audit.record(session, actor, "location.acceptHostKey", target, {"accepted": accepted})


def forget_scope(session: Session, scope: str) -> None:
    session.execute(delete(SshHostKey).where(SshHostKey.scope == scope))


def view(session: Session, scope: str) -> list[dict[str, Any]]:
    """A location's recorded host keys, and any changed key refused since."""
    rows = session.scalars(
        select(SshHostKey).where(SshHostKey.scope == scope).order_by(SshHostKey.address, SshHostKey.port)
    )
    out = []
    for row in rows:
        item: dict[str, Any] = {
            "address": row.address,
            "port": row.port,
            "key": rules.describe(row.key),
            "first_seen": _iso(row.first_seen),
            "state": "trusted",
        }
        if row.refused_key:
            item.update(
                {
                    "state": "changed",
                    "refused_key": rules.describe(row.refused_key),
                    "refused_at": _iso(row.refused_at or 0),
                    "fix": f"cloudlet location update -n {scope} --accept-host-key {row.address}:{row.port}",
                }
            )
        out.append(item)
    return out
