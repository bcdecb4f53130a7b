"""Principals, API keys and short-lived access tokens.

API keys (``clk_…``) are random and stored as SHA-256 hashes (they carry enough entropy that a
slow hash adds nothing but latency). Access tokens (``clt_…``) are HMAC-signed with the
installation's secret, so every replica verifies them without a store round trip.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
import uuid
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.domain.errors import CloudletError
from cloudlet.domain.roles import Role
from cloudlet.services.clock import utcnow
from cloudlet.services.context import Caller
from cloudlet.store.schema import ApiKey, Installation, Principal, RoleAssignment

KEY_PREFIX = "clk_"
TOKEN_PREFIX = "clt_"
TOKEN_LIFETIME_S = 3600


def _unauthenticated(message: str) -> CloudletError:
    return CloudletError(code="AuthenticationFailed", message=message, status=401)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class IssuedKey:
    id: str
    api_key: str
    principal: str


def create_principal(session: Session, name: str, is_admin: bool = False) -> Principal:
    if session.scalar(select(Principal).where(Principal.name == name)) is not None:
        raise CloudletError("PrincipalExists", f"a user named '{name}' already exists", "name", 409)
    principal = Principal(name=name, is_admin=is_admin, created_on=utcnow())
    session.add(principal)
    session.flush()
    return principal


def issue_key(session: Session, principal: Principal) -> IssuedKey:
    key = KEY_PREFIX + secrets.token_urlsafe(30)
    row = ApiKey(
        id=str(uuid.uuid4()),
        principal_id=principal.id,
        key_hash=hash_key(key),
        prefix=key[:8],
        created_on=utcnow(),
        revoked=False,
    )
    session.add(row)
    return IssuedKey(id=row.id, api_key=key, principal=principal.name)


def load_caller(session: Session, principal: Principal) -> Caller:
    rows = session.execute(
        select(RoleAssignment.workspace_id, RoleAssignment.role).where(
            RoleAssignment.principal_id == principal.id
        )
    ).all()
    return Caller(
        principal_id=principal.id,
        name=principal.name,
        is_admin=principal.is_admin,
        roles={ws: Role(role) for ws, role in rows},
    )


# Callers resolved in the last few seconds, by credential. Role changes made through this process
# clear it at once; other replicas see them within CALLER_CACHE_TTL_S.
CALLER_CACHE_TTL_S = 2.0
_callers: dict[str, tuple[float, Caller]] = {}


def forget_callers() -> None:
    _callers.clear()


def cached_caller(bearer: str) -> Caller | None:
    """The caller this credential resolved to in the last CALLER_CACHE_TTL_S, without the store."""
    hit = _callers.get(bearer)
    return hit[1] if hit is not None and hit[0] > time.monotonic() else None


def authenticate(session: Session, bearer: str, secret: str) -> Caller:
    now = time.monotonic()
    hit = _callers.get(bearer)
    if hit is not None and hit[0] > now:
        return hit[1]
    caller = _authenticate(session, bearer, secret)
    if len(_callers) > 10_000:
        _callers.clear()
    _callers[bearer] = (now + CALLER_CACHE_TTL_S, caller)
    return caller


def _authenticate(session: Session, bearer: str, secret: str) -> Caller:
    if bearer.startswith(TOKEN_PREFIX):
        principal_id = verify_token(bearer, secret)
        principal = session.get(Principal, principal_id)
    elif bearer.startswith(KEY_PREFIX):
        principal = session.scalar(
            select(Principal)
            .join(ApiKey, ApiKey.principal_id == Principal.id)
            .where(ApiKey.key_hash == hash_key(bearer), ApiKey.revoked.is_(False))
        )
    else:
        raise _unauthenticated("the bearer token is neither a cloudlet API key nor an access token")
    if principal is None:
        raise _unauthenticated("unknown or revoked credential; get a key with `cloudlet user key-create`")
    return load_caller(session, principal)


def mint_token(principal_id: int, secret: str, lifetime_s: int = TOKEN_LIFETIME_S) -> tuple[str, int]:
    expires = int(time.time()) + lifetime_s
    payload = base64.urlsafe_b64encode(json.dumps({"p": principal_id, "e": expires}).encode()).decode()
    signature = hmac.new(secret.encode(), payload.encode(), hashlib.sha256).hexdigest()
    return f"{TOKEN_PREFIX}{payload}.{signature}", expires


def verify_token(token: str, secret: str) -> int:
    try:
        payload, signature = token[len(TOKEN_PREFIX) :].rsplit(".", 1)
        expected = hmac.new(secret.encode(), payload.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, signature):
            raise ValueError("bad signature")
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (ValueError, json.JSONDecodeError):
        raise _unauthenticated("the access token is malformed or was not issued by this server") from None
    if claims["e"] < time.time():
        raise _unauthenticated("the access token has expired; get a new one with `cloudlet auth token`")
    return int(claims["p"])


def installation(session: Session) -> Installation:
    row = session.scalar(select(Installation))
    if row is None:
        raise RuntimeError("the store has not been bootstrapped")
    return row


def compute_identity_token(
    session: Session,
    compute_name: str,
    workspace_id: int,
    identity_spec: dict[str, object] | None,
    lifetime_s: int,
) -> str | None:
    """C13: a cluster with a managed identity gives its jobs a short-lived token of its own principal
    (``<compute>@identity``, Reader on the workspace unless granted more), never the submitter's."""
    if not identity_spec or identity_spec.get("type") in (None, "none"):
        return None
    name = f"{compute_name}.{workspace_id}@identity"
    principal = session.scalar(select(Principal).where(Principal.name == name))
    if principal is None:
        principal = create_principal(session, name)
        session.add(
            RoleAssignment(principal_id=principal.id, workspace_id=workspace_id, role=Role.READER.value)
        )
        session.flush()
    token, _ = mint_token(principal.id, installation(session).token_secret, lifetime_s)
    return token
