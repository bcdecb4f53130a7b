"""Principals, authentication and short-lived access tokens (API keys: ``services/access/api_keys.py``).

``/msi/token`` (the Azure ML facade, ``api/arm/``) mints JWTs (HS256) for the same principal and
key, with the audience the client asked for; ``authenticate`` accepts them like access tokens.

API keys (``clk_…``) are random and stored as SHA-256 hashes (they carry enough entropy that a
slow hash adds nothing but latency). Access tokens (``clt_…``) are HMAC-signed with the
installation's secret and carry the id of the key they were minted from, so revoking the key ends
them: a token costs two primary-key reads (its principal and its key) once per caller cache period.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jwt
from sqlalchemy import Engine, event, or_, select, update
from sqlalchemy.orm import Session

from cloudlet.domain.access.roles import Role
from cloudlet.domain.errors import CloudletError, conflict, forbidden, not_found, validation_error
from cloudlet.services.access import audit
from cloudlet.services.core.clock import as_utc, iso, utcnow
from cloudlet.services.core.context import Caller
from cloudlet.services.core.use_case import use_case
from cloudlet.store.schema import ApiKey, Installation, Principal, RoleAssignment

log = logging.getLogger("cloudlet.identity")

KEY_PREFIX = "clk_"
TOKEN_PREFIX = "clt_"
TOKEN_LIFETIME_S = 3600
IDENTITY_SUFFIX = "@identity"  # compute identities' principals: <compute>.<workspace id>@identity
# Letters, digits and . _ @ - (an e-mail address fits); no ':' so no user can pass for a
# ``system:<component>`` actor in the audit log.
PRINCIPAL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,127}")
# A key's last use is written at most this often (not on every request, which would make every
# read a write); the listing shows it to within this resolution.
LAST_USED_RESOLUTION_S = 300


def unauthenticated(message: str, reason: str = "InvalidCredential") -> CloudletError:
    """401 with the reason in ``details`` for programs (the message says it, and the fix, for people)."""
    return CloudletError(
        code="AuthenticationFailed",
        message=message,
        target="Authorization",
        status=401,
        details=[{"code": reason, "message": message}],
    )


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


# -- principals -------------------------------------------------------------------------------
def principal_target(name: str) -> str:
    return f"/principals/{name}"


def find_principal(session: Session, name: str) -> Principal | None:
    return session.scalar(select(Principal).where(Principal.name == name))


def require_principal(session: Session, name: str) -> Principal:
    principal = find_principal(session, name)
    if principal is None:
        raise not_found("User", name)
    return principal


def create_principal(session: Session, name: str, actor: str, is_admin: bool = False) -> Principal:
    if find_principal(session, name) is not None:
        raise conflict(
            "PrincipalExists", f"a user named '{name}' already exists; choose another name", "name"
        )
    principal = Principal(name=name, is_admin=is_admin, created_on=utcnow())
    session.add(principal)
    session.flush()
    audit.record(session, actor, "principal.create", principal_target(name), {"is_admin": is_admin})
    return principal


def list_principals(session: Session) -> list[Principal]:
    return list(session.scalars(select(Principal).order_by(Principal.name)))


def render_principal(principal: Principal) -> dict[str, Any]:
    return {
        "name": principal.name,
        "is_admin": principal.is_admin,
        "enabled": principal.disabled_on is None,
        "created_on": iso(principal.created_on),
        "disabled_on": iso(principal.disabled_on),
    }


def set_enabled(session: Session, principal: Principal, enabled: bool, caller: Caller) -> bool:
    """Disable (or enable again) a user; False when it already was so. A disabled user's keys and
    tokens stop authenticating within the caller cache period (at once on this process)."""
    if enabled == (principal.disabled_on is None):
        return False
    if not enabled:
        if principal.id == caller.principal_id:
            raise conflict(
                "CannotDisableSelf", "you cannot disable yourself; ask another administrator", principal.name
            )
        ensure_an_administrator_remains(session, principal, None)
    principal.disabled_on = None if enabled else utcnow()
    action = "principal.enable" if enabled else "principal.disable"
    audit.record(session, caller.name, action, principal_target(principal.name), {"enabled": enabled})
    forget_callers_on_commit(session)
    return True


def require_admin(caller: Caller, what: str) -> None:
    if not caller.is_admin:
        raise forbidden(f"'{caller.name}' is not an administrator; {what} is for administrators")


def check_principal_name(name: str) -> None:
    """A user's name as every front door takes it (the REST body's validator says the same)."""
    if not PRINCIPAL_NAME.fullmatch(name) or name.endswith(IDENTITY_SUFFIX):
        raise validation_error(
            "name",
            "a user name is 1 to 128 letters, digits and . _ @ -, starting with a letter or digit "
            "(names ending in '@identity' are the computes' own)",
        )


@use_case
def add_principal(session: Session, caller: Caller, name: str, is_admin: bool) -> Principal:
    """The use case behind ``POST /principals``: an administrator creates a user, committed."""
    require_admin(caller, "creating users")
    check_principal_name(name)
    principal = create_principal(session, name, caller.name, is_admin)
    session.commit()
    return principal


@use_case
def change_enabled(session: Session, caller: Caller, name: str, enabled: bool) -> Principal:
    """The use case behind ``PATCH /principals/{name}``: disable a user or enable them again,
    committed."""
    require_admin(caller, "disabling and enabling users")
    principal = require_principal(session, name)
    set_enabled(session, principal, enabled, caller)
    session.commit()
    return principal


def ensure_an_administrator_remains(session: Session, principal: Principal, ending: ApiKey | None) -> None:
    """Refuse to end the last way in: revoking ``ending`` (or, with None, disabling ``principal``)
    must leave some enabled administrator with a key that works."""
    if not principal.is_admin or principal.disabled_on is not None:
        return
    now = utcnow()
    stmt = (
        select(ApiKey.id)
        .join(Principal, Principal.id == ApiKey.principal_id)
        .where(
            Principal.is_admin.is_(True),
            Principal.disabled_on.is_(None),
            ApiKey.revoked.is_(False),
            or_(ApiKey.expires_on.is_(None), ApiKey.expires_on > now),
        )
    )
    # Disabling: another administrator must have a working key; revoking: another working key
    # (this administrator's or another's) must remain.
    stmt = stmt.where(Principal.id != principal.id if ending is None else ApiKey.id != ending.id)
    if session.scalar(stmt.limit(1)) is None:
        raise CloudletError(
            "LastAdministratorKey",
            "this would leave no enabled administrator with a working API key; create another first "
            "(`cloudlet user key-create <admin>`, or `cloudlet user create <name> --admin`)",
            principal.name,
            409,
        )


def load_caller(session: Session, principal: Principal, key_id: str | None = None) -> Caller:
    if principal.disabled_on is not None:
        raise unauthenticated(
            f"user '{principal.name}' was disabled on {iso(principal.disabled_on)}; an administrator can "
            f"enable it again with `cloudlet user enable {principal.name}`",
            "UserDisabled",
        )
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
        key_id=key_id,
    )


# -- authentication ---------------------------------------------------------------------------
# Callers resolved in the last few seconds, by credential. Changes to keys, users and roles made
# through this process clear it when they commit; other processes and replicas see them within
# CALLER_CACHE_TTL_S. This is the bound on revocation (docs/access.md).
CALLER_CACHE_TTL_S = 2.0
_callers: dict[str, tuple[float, Caller]] = {}


def forget_callers() -> None:
    _callers.clear()


def forget_callers_on_commit(session: Session) -> None:
    """Clear the cache once this transaction commits: cleared earlier, a request in between could
    cache what is about to change for another CALLER_CACHE_TTL_S."""
    event.listen(session, "after_commit", lambda _session: forget_callers(), once=True)


def cached_caller(bearer: str) -> Caller | None:
    """The caller this credential resolved to in the last CALLER_CACHE_TTL_S, without the store."""
    hit = _callers.get(bearer)
    return hit[1] if hit is not None and hit[0] > time.monotonic() else None


def authenticate(
    session: Session, bearer: str, secret: str, audiences: frozenset[str] = frozenset()
) -> Caller:
    """AUDIENCES: the ``aud`` values a JWT may carry here (none: JWTs are refused)."""
    return _through_cache(bearer, lambda: _authenticate(session, bearer, secret, audiences))


def _through_cache(cache_key: str, resolve: Callable[[], tuple[Caller, float | None]]) -> Caller:
    """The caller cached under CACHE_KEY in the last CALLER_CACHE_TTL_S, else RESOLVE's, cached."""
    now = time.monotonic()
    hit = _callers.get(cache_key)
    if hit is not None and hit[0] > now:
        return hit[1]
    caller, valid_until = resolve()
    _remember(cache_key, now, caller, valid_until)
    return caller


def _remember(cache_key: str, now: float, caller: Caller, valid_until: float | None) -> None:
    # A credential that expires within the cache period is cached only until it expires.
    ttl = CALLER_CACHE_TTL_S if valid_until is None else min(CALLER_CACHE_TTL_S, valid_until - time.time())
    if ttl > 0:
        if len(_callers) > 10_000:
            _callers.clear()
        _callers[cache_key] = (now + ttl, caller)


def _authenticate(
    session: Session, bearer: str, secret: str, audiences: frozenset[str]
) -> tuple[Caller, float | None]:
    """The caller and the wall-clock time (epoch s) its credential stops being valid, if it does."""
    if bearer.startswith(TOKEN_PREFIX) or bearer.startswith(JWT_PREFIX):
        if bearer.startswith(TOKEN_PREFIX):
            claims = verify_token_claims(bearer, secret)
        else:
            claims = verify_jwt(bearer, secret, audiences)
        return _standing(session, claims.principal_id, claims.key_id, claims.expires)
    if bearer.startswith(KEY_PREFIX):
        key = session.scalar(select(ApiKey).where(ApiKey.key_hash == hash_key(bearer)))
        if key is None:
            raise unauthenticated(
                "unknown API key; check it was copied whole, or ask an administrator for one "
                "(`cloudlet user key-create <user>`)",
                "UnknownKey",
            )
        principal = session.get(Principal, key.principal_id)
        assert principal is not None  # api_keys.principal_id cascades
        _check_active(key, principal, minted_from=False)
        caller = load_caller(session, principal, key.id)
        _note_use(session, key)
        return caller, _earliest(None, key.expires_on)
    raise unauthenticated(
        "the bearer token is neither a cloudlet API key (clk_…), an access token (clt_…) nor a JWT "
        "from this server's /msi/token",
        "Malformed",
    )


def _standing(
    session: Session, principal_id: int, key_id: str | None, expires: float | None
) -> tuple[Caller, float | None]:
    """The caller a credential minted for PRINCIPAL_ID from KEY_ID stands for now: refused when
    the user is gone or disabled, or the key is gone, revoked or expired."""
    principal = session.get(Principal, principal_id)
    if principal is None:
        raise unauthenticated("the access token's user no longer exists", "UnknownPrincipal")
    valid_until = expires
    if key_id is not None:
        key = session.get(ApiKey, key_id)
        if key is None or key.principal_id != principal.id:
            raise unauthenticated(
                "the API key this access token was minted from no longer exists; "
                "get a new token with `cloudlet auth token`",
                "KeyRevoked",
            )
        _check_active(key, principal, minted_from=True)
        valid_until = _earliest(valid_until, key.expires_on)
    return load_caller(session, principal, key_id), valid_until


def _issuer_key(principal_id: int, key_id: str | None) -> str:
    # Not a credential's shape (clk_/clt_/eyJ): no bearer token can hit this entry.
    return f"issuer:{principal_id}:{key_id or ''}"


def cached_issuer(principal_id: int, key_id: str | None) -> Caller | None:
    """``cached_caller`` for what a signature's issuer stands for (``issuer``), without the store."""
    return cached_caller(_issuer_key(principal_id, key_id))


def issuer(session: Session, principal_id: int, key_id: str | None) -> Caller:
    """The caller behind something issued for PRINCIPAL_ID under KEY_ID (a Blob signature), as
    it stands now: checked and cached exactly as an access token minted from that key is, so
    revoking the key, disabling the user or changing their roles reaches it in the same
    CALLER_CACHE_TTL_S."""
    return _through_cache(
        _issuer_key(principal_id, key_id), lambda: _standing(session, principal_id, key_id, None)
    )


def _earliest(epoch_s: float | None, expires_on: datetime | None) -> float | None:
    at = as_utc(expires_on)
    if at is None:
        return epoch_s
    return at.timestamp() if epoch_s is None else min(epoch_s, at.timestamp())


def _check_active(key: ApiKey, principal: Principal, minted_from: bool) -> None:
    what = f"API key {key.prefix}… (id {key.id})"
    if minted_from:
        what = f"the {what} this access token was minted from"
    fix = (
        f"ask an administrator for a new key (`cloudlet user key-create {principal.name}`)"
        if not minted_from
        else "get a token from a valid key (`cloudlet auth token`)"
    )
    if key.revoked:
        when = f" on {iso(key.revoked_on)}" if key.revoked_on else ""
        replaced = f" and replaced by key {key.replaced_by}" if key.replaced_by else ""
        raise unauthenticated(f"{what} was revoked{when}{replaced}; {fix}", "KeyRevoked")
    expires = as_utc(key.expires_on)
    if expires is not None and expires <= utcnow():
        raise unauthenticated(
            f"{what} expired on {iso(expires)}; {fix}, or rotate it "
            f"(`cloudlet user key-rotate {principal.name} --id {key.id}`)",
            "KeyExpired",
        )


def _note_use(session: Session, key: ApiKey) -> None:
    """Record the key's last use when the recorded one is older than the resolution. A request's
    own transaction takes the write when it is a writer; a reader's (GET) cannot write, so a
    separate short transaction does. Best effort: a failure here never fails the request."""
    now = utcnow()
    last = as_utc(key.last_used_on)
    if last is not None and (now - last).total_seconds() < LAST_USED_RESOLUTION_S:
        return
    stmt = update(ApiKey).where(ApiKey.id == key.id).values(last_used_on=now)
    try:
        bind = session.get_bind()
        if isinstance(bind, Engine) and bind.get_execution_options().get("cloudlet_read_only", False):
            with bind.execution_options(cloudlet_read_only=False).begin() as conn:
                conn.execute(stmt)
        else:
            session.execute(stmt, execution_options={"synchronize_session": False})
    except Exception:
        log.warning("could not record the last use of API key %s", key.id, exc_info=True)


# -- tokens -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class TokenClaims:
    principal_id: int
    expires: int  # epoch seconds
    key_id: str | None  # the key it was minted from; None for the control plane's own tokens


def mint_token(
    principal_id: int,
    secret: str,
    lifetime_s: int = TOKEN_LIFETIME_S,
    key_id: str | None = None,
    not_after: datetime | None = None,
) -> tuple[str, int]:
    """A signed token; ``key_id`` ties it to a key (revoking the key ends it) and ``not_after``
    (the key's expiry) caps its lifetime."""
    expires = int(time.time()) + lifetime_s
    cap = as_utc(not_after)
    if cap is not None:
        expires = min(expires, int(cap.timestamp()))
    claims: dict[str, Any] = {"p": principal_id, "e": expires}
    if key_id is not None:
        claims["k"] = key_id
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode()
    signature = hmac.new(secret.encode(), payload.encode(), hashlib.sha256).hexdigest()
    return f"{TOKEN_PREFIX}{payload}.{signature}", expires


def mint_for(
    session: Session, caller: Caller, secret: str, lifetime_s: int = TOKEN_LIFETIME_S
) -> tuple[str, int]:
    """A token for the caller, tied to (and no longer-lived than) the key behind its credential."""
    key = session.get(ApiKey, caller.key_id) if caller.key_id else None
    return mint_token(
        caller.principal_id,
        secret,
        lifetime_s,
        key_id=caller.key_id,
        not_after=key.expires_on if key else None,
    )


def verify_token_claims(token: str, secret: str) -> TokenClaims:
    try:
        payload, signature = token[len(TOKEN_PREFIX) :].rsplit(".", 1)
        expected = hmac.new(secret.encode(), payload.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, signature):
            raise ValueError("bad signature")
        claims = json.loads(base64.urlsafe_b64decode(payload))
        parsed = TokenClaims(int(claims["p"]), int(claims["e"]), claims.get("k"))
    except (ValueError, KeyError, TypeError, json.JSONDecodeError):
        raise unauthenticated(
            "the access token is malformed or was not issued by this server", "Malformed"
        ) from None
    if parsed.expires < time.time():
        raise unauthenticated(
            "the access token has expired; get a new one with `cloudlet auth token`", "TokenExpired"
        )
    return parsed


# -- JWTs for azure-ai-ml (``/msi/token``) ------------------------------------------------------
JWT_PREFIX = "eyJ"  # base64url of '{"'
JWT_ALGORITHM = "HS256"


def _jwt_key(secret: str) -> bytes:
    """A key of its own, derived from the installation's token secret (in the store, so every
    replica verifies what any replica minted)."""
    return hmac.new(secret.encode(), b"cloudlet-jwt-v1", hashlib.sha256).digest()


def audience_of(resource: str) -> str:
    """A requested resource or scope as an audience: ``https://ml.azure.cloudlet/.default`` and
    ``https://ml.azure.cloudlet/`` are ``https://ml.azure.cloudlet``."""
    value = resource.strip()
    if value.endswith("/.default"):
        value = value[: -len("/.default")]
    return value.rstrip("/")


# Azure Storage's resource: what azure-storage-blob asks a token credential for. cloudlet's Blob
# service takes only its own signatures, so such a JWT opens nothing here; it is issued because a
# client that builds a blob client from DefaultAzureCredential asks for it before it is ever used.
STORAGE_AUDIENCE = "https://storage.azure.com"
# Azure's public resource-manager and Azure ML audiences, which Azure's own samples ask for by name
# (the SDK pipeline notebook probes DefaultAzureCredential with management.azure.com/.default and
# falls back to an interactive browser login when refused). Likewise a JWT for them opens nothing
# here: cloudlet's API takes its own audiences.
SAMPLE_AUDIENCES = frozenset(
    {"https://management.azure.com", "https://management.core.windows.net", "https://ml.azure.com"}
)


def token_audience(resource: str, accepted: frozenset[str]) -> str:
    """The audience of a JWT ``/msi/token`` may issue for RESOURCE: one this server accepts
    (ACCEPTED: azure-ai-ml's ``aml_resource_id`` and the resource-manager URL under each name the
    certificate carries), Azure Storage's, or Azure's public ones that samples name. Anything else
    is a 400: a JWT signed with this installation's key for a third party's audience is a
    credential nobody here needs."""
    audience = audience_of(resource)
    allowed = accepted | {STORAGE_AUDIENCE} | SAMPLE_AUDIENCES
    if audience not in allowed:
        raise CloudletError(
            "InvalidResource",
            f"resource '{resource[:200]}' is not an audience this server issues tokens for; ask for "
            f"one of: {', '.join(sorted(allowed))} (a trailing '/' or '/.default' is accepted)",
            "resource",
            400,
        )
    return audience


def mint_jwt(
    session: Session,
    caller: Caller,
    credential: str,
    secret: str,
    audience: str,
    tenant: str,
    lifetime_s: int = TOKEN_LIFETIME_S,
) -> tuple[str, int]:
    """A JWT for the caller behind CREDENTIAL (a key or a token), tied to its key and no longer-lived
    than the credential: ``aud`` the audience, ``tid`` the installation, ``oid``/``sub`` the principal."""
    import uuid

    key = session.get(ApiKey, caller.key_id) if caller.key_id else None
    expires = int(time.time()) + lifetime_s
    cap = as_utc(key.expires_on) if key else None
    if cap is not None:
        expires = min(expires, int(cap.timestamp()))
    if credential.startswith(TOKEN_PREFIX):
        expires = min(expires, verify_token_claims(credential, secret).expires)
    elif credential.startswith(JWT_PREFIX):
        expires = min(expires, int(jwt.decode(credential, options={"verify_signature": False})["exp"]))
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": f"cloudlet:{tenant}",
        "aud": audience,
        "tid": tenant,
        "oid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"cloudlet:{tenant}:principal:{caller.principal_id}")),
        "sub": caller.name,
        "name": caller.name,
        "iat": now,
        "nbf": now - 5,
        "exp": expires,
        "cloudlet_pid": caller.principal_id,
    }
    if caller.key_id is not None:
        claims["cloudlet_kid"] = caller.key_id
    return jwt.encode(claims, _jwt_key(secret), algorithm=JWT_ALGORITHM), expires


def verify_jwt(token: str, secret: str, audiences: frozenset[str]) -> TokenClaims:
    fix = "get a new one from /msi/token (the IDENTITY_ENDPOINT of `cloudlet azureml env`)"
    try:
        claims = jwt.decode(
            token,
            _jwt_key(secret),
            algorithms=[JWT_ALGORITHM],
            audience=sorted(audiences) or ["-"],
            options={"require": ["exp", "aud", "cloudlet_pid"]},
        )
        return TokenClaims(int(claims["cloudlet_pid"]), int(claims["exp"]), claims.get("cloudlet_kid"))
    except jwt.ExpiredSignatureError:
        raise unauthenticated(f"the JWT has expired; {fix}", "TokenExpired") from None
    except jwt.InvalidAudienceError:
        raise unauthenticated(
            f"the JWT's audience is not this server; ask for one of: {', '.join(sorted(audiences))}",
            "InvalidAudience",
        ) from None
    except (jwt.InvalidTokenError, ValueError, TypeError):
        raise unauthenticated(
            f"the JWT is malformed or was not signed by this server; {fix}", "Malformed"
        ) from None


def verify_token(token: str, secret: str) -> int:
    """The principal id of a valid token (signature and lifetime only; ``authenticate`` also
    checks the key it was minted from and the user)."""
    return verify_token_claims(token, secret).principal_id


def installation(session: Session) -> Installation:
    row = session.scalar(select(Installation))
    if row is None:
        raise RuntimeError("the store has not been bootstrapped")
    return row
