"""Shared-access signatures for the Blob service (``api/blob.py``): the only way into it.

cloudlet mints them (an ARM pending upload, a datastore's ``listSecrets``) and verifies them on
every Blob request. A signature is an HMAC-SHA256, under a key derived from the installation's
token secret, over the account (which names the workspace), the container (a datastore), the
path prefix it is confined to, the permissions, the expiry, and who it was issued to: the
principal and the API key behind the credential that asked for it. It carries no authority of
its own: on every use the issuer is looked up as an access token minted from that key would be
(``identity.issuer``, cached for at most ``CALLER_CACHE_TTL_S``), so a revoked or expired key, a
disabled user or a removed role ends it within that time, and a role lowered to Reader leaves it
read-only (``narrow``). It is also short-lived (``DEFAULT_TTL``).

The query string is made of Azure's SAS fields (``sv``, ``sr``, ``sp``, ``se``, ``sig``, ``si``
carrying the prefix, ``skoid`` the issuing principal's id and ``sktid`` the key's id), because the
Azure clients keep only those from a URL and pass them along unchanged on every request.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

from cloudlet.domain.access.roles import Access
from cloudlet.services.core.context import Caller

SAS_VERSION = "2023-11-03"
# Long enough for the SDK's uploads (it asks for a signature per upload and checks no expiry; the
# signature is checked when each request starts, so a long block upload runs to its end), short
# enough that a leaked URL is worth minutes.
DEFAULT_TTL = timedelta(minutes=15)
ALL_PERMISSIONS = "racwdl"  # read, add, create, write, delete, list
READ_PERMISSIONS = "rl"
_ACCOUNT = re.compile(r"^ws([1-9][0-9]{0,17})$")
_EXPIRY_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


class SasError(Exception):
    """A request the signature does not cover: Azure's code for it and what to do."""

    def __init__(self, code: str, message: str, status: int = 403) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


def account_name(workspace_id: int) -> str:
    """The storage account of a workspace in Blob URLs (``/blob/ws12/…``)."""
    return f"ws{workspace_id}"


def workspace_of(account: str) -> int | None:
    found = _ACCOUNT.match(account)
    return int(found.group(1)) if found else None


def _key(secret: str) -> bytes:
    # v2: the issuer is signed too (v1 signatures, which had none, no longer verify).
    return hmac.new(secret.encode(), b"cloudlet-blob-sas-v2", hashlib.sha256).digest()


def _sign(secret: str, *fields: str) -> str:
    """The signature over the account, container, prefix, permissions, expiry and issuer."""
    digest = hmac.new(_key(secret), "\n".join((SAS_VERSION, *fields)).encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


@dataclass(frozen=True)
class Issuer:
    """Who a signature was issued to: a principal, and the API key behind its credential (None for
    a credential tied to no key, such as a compute identity's token)."""

    principal_id: int
    key_id: str | None

    @classmethod
    def of(cls, caller: Caller) -> Issuer:
        return cls(caller.principal_id, caller.key_id)


def mint(
    secret: str,
    workspace_id: int,
    container: str,
    issuer: Issuer,
    prefix: str = "",
    permissions: str = ALL_PERMISSIONS,
    ttl: timedelta = DEFAULT_TTL,
    now: datetime | None = None,
) -> str:
    """A query string (no leading '?') granting ``permissions`` on the blobs of ``container``
    whose names start with the folder ``prefix`` ('' for the whole container), until ``ttl``, for
    as long as ISSUER may do so."""
    expiry = ((now or datetime.now(UTC)) + ttl).strftime(_EXPIRY_FORMAT)
    prefix = prefix.strip("/")
    account = account_name(workspace_id)
    principal, key = str(issuer.principal_id), issuer.key_id or ""
    sig = _sign(secret, account, container, prefix, permissions, expiry, principal, key)
    fields = {"sv": SAS_VERSION, "sr": "c", "sp": permissions, "se": expiry, "si": prefix}
    fields.update({"skoid": principal, "sktid": key, "sig": sig})
    return "&".join(f"{k}={quote(v, safe='')}" for k, v in fields.items() if v)


@dataclass(frozen=True)
class Grant:
    workspace_id: int
    container: str
    prefix: tuple[str, ...]
    permissions: str
    expiry: datetime
    issuer: Issuer

    def covers(self, parts: tuple[str, ...]) -> bool:
        """True when a blob (or a listing's prefix) named by ``parts`` lies beneath the prefix."""
        return parts[: len(self.prefix)] == self.prefix

    def require(self, permission: str, parts: tuple[str, ...] | None = None) -> None:
        if permission not in self.permissions:
            raise SasError(
                "AuthorizationPermissionMismatch",
                f"this signature does not grant '{permission}' (it grants '{self.permissions}'); "
                "ask cloudlet for a signature with that permission",
            )
        if parts is not None and not self.covers(parts):
            raise SasError(
                "AuthorizationFailure",
                f"this signature covers only blobs beneath '{'/'.join(self.prefix)}/'; "
                "ask cloudlet for a signature covering this path",
            )


def verify(
    secret: str, account: str, container: str, query: dict[str, str], now: datetime | None = None
) -> Grant:
    """The grant a request's query string carries for ``account``/``container``, or SasError."""
    workspace_id = workspace_of(account)
    if workspace_id is None:
        raise SasError("InvalidResourceName", f"'{account}' is not a cloudlet storage account", 400)
    sig = query.get("sig")
    if not sig:
        raise SasError(
            "NoAuthenticationInformation",
            "this Blob service takes only cloudlet's signed URLs: append the SAS token cloudlet "
            "gave (startPendingUpload or datastores listSecrets) to the URL",
            401,
        )
    permissions, expiry_text, prefix = query.get("sp", ""), query.get("se", ""), query.get("si", "")
    principal, key = query.get("skoid", ""), query.get("sktid", "")
    expected = _sign(secret, account, container, prefix, permissions, expiry_text, principal, key)
    if query.get("sv") != SAS_VERSION or not hmac.compare_digest(expected, sig) or not principal.isdigit():
        raise SasError(
            "AuthenticationFailed",
            "the signature does not match this account, container, prefix, permissions and expiry; "
            "use the SAS token exactly as cloudlet issued it",
        )
    try:
        expiry = datetime.strptime(expiry_text, _EXPIRY_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        raise SasError("AuthenticationFailed", f"se '{expiry_text}' is not a time") from None
    if (now or datetime.now(UTC)) >= expiry:
        raise SasError(
            "AuthenticationFailed",
            f"the signature expired at {expiry_text}; ask cloudlet for a new one",
        )
    parts = tuple(p for p in prefix.split("/") if p)
    return Grant(workspace_id, container, parts, permissions, expiry, Issuer(int(principal), key or None))


def permissions_for(caller: Caller, workspace_id: int) -> str:
    """What a signature minted for CALLER on the workspace grants: all to a writer, read and list to
    a reader (``narrow`` applies the same rule again on every use)."""
    return ALL_PERMISSIONS if caller.can(workspace_id, Access.WRITE) else READ_PERMISSIONS


def narrow(grant: Grant, issuer: Caller) -> Grant:
    """GRANT as far as its issuer, as they stand now, may still use it: whole for a writer of the
    workspace, read and list for a reader, refused for anyone else."""
    if issuer.can(grant.workspace_id, Access.WRITE):
        return grant
    if issuer.can(grant.workspace_id, Access.READ):
        kept = "".join(p for p in grant.permissions if p in READ_PERMISSIONS)
        return replace(grant, permissions=kept)
    raise SasError(
        "AuthorizationFailure",
        f"the user this signature was issued to ('{issuer.name}') no longer has a role on this "
        "workspace; ask its owner for access, then for a new signature",
    )


def refused_issuer(message: str) -> SasError:
    """The issuer's key or user no longer stands (revoked, expired, disabled, deleted)."""
    return SasError(
        "AuthenticationFailed",
        f"the credential this signature was issued for is no longer valid: {message}; "
        "ask cloudlet for a new signature with a valid credential",
    )
