"""Shared-access signatures for the Blob service (``api/blob.py``): the only way into it.

cloudlet mints them (an ARM pending upload, a datastore's ``listSecrets``) and verifies them on
every Blob request. A signature is an HMAC-SHA256, under a key derived from the installation's
token secret, over the account (which names the workspace), the container (a datastore), the
path prefix it is confined to, the permissions and the expiry; it is short-lived and carries no
other authority. The query string is made of Azure's SAS fields (``sv``, ``sr``, ``sp``, ``se``,
``sig``, and ``si`` carrying the prefix), because the Azure clients keep only those from a URL and
pass them along unchanged on every request.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

SAS_VERSION = "2023-11-03"
DEFAULT_TTL = timedelta(hours=1)
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
    return hmac.new(secret.encode(), b"cloudlet-blob-sas-v1", hashlib.sha256).digest()


def _string_to_sign(account: str, container: str, prefix: str, permissions: str, expiry: str) -> bytes:
    return "\n".join((SAS_VERSION, account, container, prefix, permissions, expiry)).encode()


def _sign(secret: str, account: str, container: str, prefix: str, permissions: str, expiry: str) -> str:
    digest = hmac.new(
        _key(secret), _string_to_sign(account, container, prefix, permissions, expiry), hashlib.sha256
    ).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def mint(
    secret: str,
    workspace_id: int,
    container: str,
    prefix: str = "",
    permissions: str = ALL_PERMISSIONS,
    ttl: timedelta = DEFAULT_TTL,
    now: datetime | None = None,
) -> str:
    """A query string (no leading '?') granting ``permissions`` on the blobs of ``container``
    whose names start with the folder ``prefix`` ('' for the whole container), until ``ttl``."""
    expiry = ((now or datetime.now(UTC)) + ttl).strftime(_EXPIRY_FORMAT)
    prefix = prefix.strip("/")
    account = account_name(workspace_id)
    sig = _sign(secret, account, container, prefix, permissions, expiry)
    fields = {"sv": SAS_VERSION, "sr": "c", "sp": permissions, "se": expiry, "si": prefix, "sig": sig}
    return "&".join(f"{k}={quote(v, safe='')}" for k, v in fields.items())


@dataclass(frozen=True)
class Grant:
    workspace_id: int
    container: str
    prefix: tuple[str, ...]
    permissions: str
    expiry: datetime

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
    expected = _sign(secret, account, container, prefix, permissions, expiry_text)
    if query.get("sv") != SAS_VERSION or not hmac.compare_digest(expected, sig):
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
    return Grant(workspace_id, container, parts, permissions, expiry)
