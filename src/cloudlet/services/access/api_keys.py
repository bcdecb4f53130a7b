"""API keys: issue (with an optional expiry), list, revoke and rotate; who may do which.

Administrators manage any user's keys. A user may list, revoke and rotate their own keys but not
create more: a leaked key must not be able to mint itself a second, independent life that outlives
its revocation (a rotation revokes the key it replaces, so its owner notices). Revoked keys stay as
rows, marked, so the audit log's key ids keep a referent. Secrets are returned once, on issue.
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.domain.errors import conflict, forbidden, not_found, validation_error
from cloudlet.services.access import audit, identity
from cloudlet.services.core.clock import as_utc, given_time, iso, utcnow
from cloudlet.services.core.context import Caller
from cloudlet.services.core.use_case import use_case
from cloudlet.store.schema import ApiKey, Principal

MAX_LIFETIME_DAYS = 3650
# A rotation may leave the old key working a little longer, for the deployments that hold it to
# pick up the new one; longer than an hour is a second live key, which is what creation is for.
MAX_ROTATION_GRACE_MINUTES = 60


class KeyAction(StrEnum):
    LIST = "list"
    CREATE = "create"
    REVOKE = "revoke"
    ROTATE = "rotate"


SELF_SERVICE = frozenset({KeyAction.LIST, KeyAction.REVOKE, KeyAction.ROTATE})


def authorize(session: Session, caller: Caller, user: str, action: KeyAction) -> Principal:
    """The user whose keys the caller may act on. Another user's keys are not disclosed to a
    non-administrator (404, as for a workspace without a role); creating keys needs an admin."""
    if caller.is_admin:
        return identity.require_principal(session, user)
    if user != caller.name:
        raise not_found("User", user)
    if action not in SELF_SERVICE:
        raise forbidden(
            "only an administrator can create API keys; to replace one of yours, rotate it "
            f"(`cloudlet user key-rotate {user} --id <key id>`)"
        )
    return identity.require_principal(session, user)


def key_target(principal: Principal, key_id: str) -> str:
    return f"{identity.principal_target(principal.name)}/keys/{key_id}"


def expiry(
    expires_in_days: int | None, expires_on: datetime | None, now: datetime | None = None
) -> datetime | None:
    """When a new key stops working: in N days, at a time, or never (neither given)."""
    now = now or utcnow()
    if expires_in_days is not None and expires_on is not None:
        raise validation_error("expires_on", "give expires_in_days or expires_on, not both")
    if expires_in_days is not None:
        if not 1 <= expires_in_days <= MAX_LIFETIME_DAYS:
            raise validation_error(
                "expires_in_days",
                f"expires_in_days must be from 1 to {MAX_LIFETIME_DAYS}, got {expires_in_days}",
            )
        return now + timedelta(days=expires_in_days)
    if expires_on is None:
        return None
    at = given_time(expires_on, "expires_on")
    if at <= now:
        raise validation_error(
            "expires_on", f"expires_on must be in the future (it is {iso(now)} now); to end a key, revoke it"
        )
    if at > now + timedelta(days=MAX_LIFETIME_DAYS):
        raise validation_error("expires_on", f"a key may live at most {MAX_LIFETIME_DAYS} days")
    return at


@dataclass(frozen=True)
class IssuedKey:
    id: str
    api_key: str  # the secret: shown once, never stored
    principal: str
    prefix: str
    expires_on: datetime | None

    def render(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "api_key": self.api_key,
            "principal": self.principal,
            "prefix": self.prefix,
            "expires_on": iso(self.expires_on),
        }


def _new_key(session: Session, principal: Principal, expires_on: datetime | None) -> IssuedKey:
    if principal.disabled_on is not None:
        raise conflict(
            "UserDisabled",
            f"user '{principal.name}' is disabled; enable it first (`cloudlet user enable {principal.name}`)",
            principal.name,
        )
    secret = identity.KEY_PREFIX + secrets.token_urlsafe(30)
    row = ApiKey(
        id=str(uuid.uuid4()),
        principal_id=principal.id,
        key_hash=identity.hash_key(secret),
        prefix=secret[:8],
        created_on=utcnow(),
        revoked=False,
        expires_on=expires_on,
    )
    session.add(row)
    return IssuedKey(row.id, secret, principal.name, row.prefix, expires_on)


def issue(
    session: Session, principal: Principal, actor: str, expires_on: datetime | None = None
) -> IssuedKey:
    issued = _new_key(session, principal, expires_on)
    details = {"key_id": issued.id, "prefix": issued.prefix, "expires_on": iso(expires_on)}
    audit.record(session, actor, "apiKey.create", key_target(principal, issued.id), details)
    return issued


def list_keys(session: Session, principal: Principal) -> list[ApiKey]:
    return list(
        session.scalars(
            select(ApiKey).where(ApiKey.principal_id == principal.id).order_by(ApiKey.created_on.desc())
        )
    )


def find(session: Session, principal: Principal, key_id: str) -> ApiKey:
    row = session.get(ApiKey, key_id)
    if row is None or row.principal_id != principal.id:
        raise not_found("ApiKey", key_id)
    return row


def state(row: ApiKey, now: datetime | None = None) -> str:
    if row.revoked:
        return "Revoked"
    expires = as_utc(row.expires_on)
    return "Expired" if expires is not None and expires <= (now or utcnow()) else "Active"


def render(row: ApiKey, principal: Principal, now: datetime | None = None) -> dict[str, Any]:
    """A key as listed: never its secret nor its hash."""
    return {
        "id": row.id,
        "prefix": row.prefix,
        "principal": principal.name,
        "state": state(row, now),
        "created_on": iso(row.created_on),
        "expires_on": iso(row.expires_on),
        "last_used_on": iso(row.last_used_on),
        "revoked": row.revoked,
        "revoked_on": iso(row.revoked_on),
        "replaced_by": row.replaced_by,
    }


def revoke(session: Session, principal: Principal, key_id: str, actor: str) -> bool:
    """Revoke a key; False (and nothing written) when it already was."""
    row = find(session, principal, key_id)
    if row.revoked:
        return False
    identity.ensure_an_administrator_remains(session, principal, row)
    row.revoked, row.revoked_on = True, utcnow()
    audit.record(
        session,
        actor,
        "apiKey.revoke",
        key_target(principal, row.id),
        {"key_id": row.id, "prefix": row.prefix},
    )
    identity.forget_callers_on_commit(session)
    return True


@dataclass(frozen=True)
class Rotation:
    issued: IssuedKey
    replaced: ApiKey

    def render(self) -> dict[str, Any]:
        old_ends = self.replaced.revoked_on if self.replaced.revoked else self.replaced.expires_on
        return {**self.issued.render(), "replaces": self.replaced.id, "replaced_key_ends_on": iso(old_ends)}


def rotate(
    session: Session,
    principal: Principal,
    key_id: str,
    actor: str,
    grace_minutes: int = 0,
    expires_on: datetime | None = None,
) -> Rotation:
    """Issue a key in place of ``key_id`` and end the old one now, or after ``grace_minutes``.
    The new key lives as long as the old one was meant to (from now) unless ``expires_on`` says."""
    if not 0 <= grace_minutes <= MAX_ROTATION_GRACE_MINUTES:
        raise validation_error(
            "grace_minutes",
            f"grace_minutes must be from 0 to {MAX_ROTATION_GRACE_MINUTES}, got {grace_minutes}",
        )
    old = find(session, principal, key_id)
    if old.revoked:
        raise conflict(
            "KeyRevoked",
            f"API key {old.id} is revoked and cannot be rotated; create a new key instead "
            f"(`cloudlet user key-create {principal.name}`)",
            key_id,
        )
    now = utcnow()
    if expires_on is None and old.expires_on is not None:
        expires_on = now + (as_utc(old.expires_on) - as_utc(old.created_on))
    issued = _new_key(session, principal, expires_on)
    old.replaced_by = issued.id
    old_expiry = as_utc(old.expires_on)
    if grace_minutes == 0:
        old.revoked, old.revoked_on = True, now
    else:
        grace_end = now + timedelta(minutes=grace_minutes)
        old.expires_on = grace_end if old_expiry is None else min(old_expiry, grace_end)
    details = {
        "key_id": old.id,
        "prefix": old.prefix,
        "new_key_id": issued.id,
        "new_prefix": issued.prefix,
        "new_expires_on": iso(expires_on),
        "grace_minutes": grace_minutes,
    }
    audit.record(session, actor, "apiKey.rotate", key_target(principal, old.id), details)
    identity.forget_callers_on_commit(session)
    return Rotation(issued, old)


# -- use cases: each authorizes, writes and commits ------------------------------------------
@use_case
def create_key(
    session: Session,
    caller: Caller,
    user: str,
    expires_in_days: int | None = None,
    expires_on: datetime | None = None,
) -> IssuedKey:
    """A new key for USER (neither expiry given: it does not expire), committed."""
    principal = authorize(session, caller, user, KeyAction.CREATE)
    issued = issue(session, principal, caller.name, expiry(expires_in_days, expires_on))
    session.commit()
    return issued


@use_case
def revoke_key(session: Session, caller: Caller, user: str, key_id: str) -> None:
    """Revoke USER's key (again: nothing changes), committed."""
    principal = authorize(session, caller, user, KeyAction.REVOKE)
    revoke(session, principal, key_id, caller.name)
    session.commit()


@use_case
def rotate_key(
    session: Session,
    caller: Caller,
    user: str,
    key_id: str,
    grace_minutes: int = 0,
    expires_in_days: int | None = None,
    expires_on: datetime | None = None,
) -> Rotation:
    """A new key in place of USER's KEY_ID, committed; without an expiry the new key lives as
    long as the old one was meant to."""
    principal = authorize(session, caller, user, KeyAction.ROTATE)
    given = expires_in_days is not None or expires_on is not None
    new_expiry = expiry(expires_in_days, expires_on) if given else None
    rotation = rotate(session, principal, key_id, caller.name, grace_minutes, new_expiry)
    session.commit()
    return rotation
