"""The studio's browser sessions and one-time sign-in links (issue 27).

A session is a row keyed by the SHA-256 of a random cookie value; the cookie holds the value, the
store only its hash. Each request checks the row's idle and absolute expiry, then who it stands
for exactly as an access token minted from the same API key is checked (``identity.issuer``,
cached ``CALLER_CACHE_TTL_S``): revoking that key, disabling the user or changing their roles
reaches a session as fast as it reaches a token, by the one rule that ends both.

A one-time link is a row of kind ``link`` that lives ``LINK_LIFETIME_S``; following it deletes
it (so it works once) and makes a session for the same principal and key.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from dataclasses import dataclass

from sqlalchemy import delete, or_, update
from sqlalchemy.orm import Session

from cloudlet.domain.errors import CloudletError
from cloudlet.services.access import identity
from cloudlet.services.core.context import Caller
from cloudlet.store.schema import StudioSession

SESSION = "session"
LINK = "link"
IDLE_S = 8 * 3600  # a working day without a click ends the session
ABSOLUTE_S = 7 * 86400  # however busy, sign in again once a week
LINK_LIFETIME_S = 300
TOUCH_RESOLUTION_S = 60.0  # last_seen_at is written at most this often (not on every page)


@dataclass(frozen=True)
class Limits:
    idle_s: float = IDLE_S
    absolute_s: float = ABSOLUTE_S

    @property
    def touch_resolution_s(self) -> float:
        return min(TOUCH_RESOLUTION_S, self.idle_s / 10)

    @classmethod
    def from_env(cls) -> Limits:
        """The defaults, or ``CLOUDLET_STUDIO_IDLE_S`` / ``CLOUDLET_STUDIO_ABSOLUTE_S`` (tests
        shorten them to see expiry happen)."""
        return cls(
            float(os.environ.get("CLOUDLET_STUDIO_IDLE_S", IDLE_S)),
            float(os.environ.get("CLOUDLET_STUDIO_ABSOLUTE_S", ABSOLUTE_S)),
        )


@dataclass(frozen=True)
class Signed:
    """A session as a request sees it: who, its CSRF token, and whether last_seen_at is due."""

    caller: Caller
    id_hash: str
    csrf_token: str
    touch_due: bool


@dataclass(frozen=True)
class Issued:
    value: str  # the cookie's (or link's) value: shown once, never stored
    csrf_token: str
    expires_at: float


def hash_value(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def signed_out(message: str = "sign in to the studio") -> CloudletError:
    return identity.unauthenticated(message, "StudioSignedOut")


def _issue(session: Session, kind: str, principal_id: int, key_id: str | None, lifetime_s: float) -> Issued:
    value, now = secrets.token_urlsafe(32), time.time()
    row = StudioSession(
        id_hash=hash_value(value),
        kind=kind,
        principal_id=principal_id,
        key_id=key_id,
        csrf_token=secrets.token_urlsafe(32),
        created_at=now,
        last_seen_at=now,
        expires_at=now + lifetime_s,
    )
    session.add(row)
    return Issued(value, row.csrf_token, row.expires_at)


def _forget_expired(session: Session, limits: Limits, now: float) -> None:
    """Expired rows go when a new one is made (sign-ins are rare; no loop is needed for this)."""
    session.execute(
        delete(StudioSession).where(
            or_(
                StudioSession.expires_at < now,
                (StudioSession.kind == SESSION) & (StudioSession.last_seen_at < now - limits.idle_s),
            )
        )
    )


def sign_in(session: Session, api_key: str, secret: str, limits: Limits) -> tuple[Caller, Issued]:
    """The use case behind the sign-in form: an API key (only a key: a token would end sooner
    than the session) opens a session for its principal, committed."""
    if not api_key.startswith(identity.KEY_PREFIX):
        raise identity.unauthenticated("that is not a cloudlet API key (clk_…)", "Malformed")
    caller = identity.authenticate(session, api_key, secret)
    _forget_expired(session, limits, time.time())
    issued = _issue(session, SESSION, caller.principal_id, caller.key_id, limits.absolute_s)
    session.commit()
    return caller, issued


def create_link(session: Session, caller: Caller) -> Issued:
    """The use case behind ``POST /api/v1/studio/signin-links``: a single-use link for the caller,
    tied to the key behind its credential, committed."""
    issued = _issue(session, LINK, caller.principal_id, caller.key_id, LINK_LIFETIME_S)
    session.commit()
    return issued


def redeem_link(session: Session, value: str, limits: Limits) -> tuple[Caller, Issued]:
    """Follow a one-time link: it is deleted (a second use finds nothing) and a session is made
    for the same principal and key, as they stand now; committed."""
    now = time.time()
    row = session.get(StudioSession, hash_value(value), with_for_update=True)
    if row is None or row.kind != LINK or row.expires_at < now:
        raise signed_out("this sign-in link is unknown, used or expired; run `cloudlet studio open` again")
    gone = session.execute(
        delete(StudioSession).where(StudioSession.id_hash == row.id_hash, StudioSession.kind == LINK)
    )
    if getattr(gone, "rowcount", 1) != 1:  # another request redeemed it in between
        raise signed_out("this sign-in link was already used; run `cloudlet studio open` again")
    caller = identity.issuer(session, row.principal_id, row.key_id)
    _forget_expired(session, limits, now)
    issued = _issue(session, SESSION, row.principal_id, row.key_id, limits.absolute_s)
    session.commit()
    return caller, issued


def check(session: Session, value: str, limits: Limits) -> Signed:
    """Who the session with cookie VALUE stands for now (read only): 401 when it is unknown,
    idle or past its absolute expiry, or when its key or user no longer authenticates."""
    now, id_hash = time.time(), hash_value(value)
    row = session.get(StudioSession, id_hash)
    if row is None or row.kind != SESSION:
        raise signed_out()
    if row.expires_at < now:
        raise signed_out("your studio session reached its absolute expiry; sign in again")
    if now - row.last_seen_at > limits.idle_s:
        raise signed_out("your studio session was idle too long; sign in again")
    caller = identity.issuer(session, row.principal_id, row.key_id)
    return Signed(caller, id_hash, row.csrf_token, now - row.last_seen_at >= limits.touch_resolution_s)


def touch(session: Session, id_hash: str) -> None:
    """Record activity (idle expiry counts from here), committed."""
    session.execute(
        update(StudioSession).where(StudioSession.id_hash == id_hash).values(last_seen_at=time.time())
    )
    session.commit()


def sign_out(session: Session, id_hash: str) -> None:
    """The use case behind Sign out: the session's row is deleted, committed."""
    session.execute(delete(StudioSession).where(StudioSession.id_hash == id_hash))
    session.commit()


def csrf_matches(expected: str, sent: str | None) -> bool:
    return bool(sent) and hmac.compare_digest(expected.encode(), (sent or "").encode())
