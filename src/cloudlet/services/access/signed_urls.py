"""Short-lived signed references: a URL that carries its own authorisation (the run-history log
URLs the SDK fetches without credentials; later, SAS-style storage URLs).

A reference is ``<payload>.<signature>``: the payload is the claims (what it opens, until when) as
URL-safe base64 JSON, the signature an HMAC-SHA256 of it under a key derived from the
installation's token secret and the reference's purpose, so a reference minted for one purpose
never opens another."""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import time
from typing import Any

from cloudlet.domain.errors import CloudletError

DEFAULT_LIFETIME_S = 15 * 60


@functools.lru_cache(maxsize=64)
def _key(secret: str, purpose: str) -> bytes:
    """Derived once per (secret, purpose): every run spec an agent is handed is signed (its job's
    tracking token), and every such token a run presents is checked."""
    return hmac.new(secret.encode(), f"cloudlet-signed-url:{purpose}".encode(), hashlib.sha256).digest()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def sign(secret: str, purpose: str, claims: dict[str, Any], lifetime_s: int = DEFAULT_LIFETIME_S) -> str:
    payload = _b64(
        json.dumps({**claims, "exp": int(time.time()) + lifetime_s}, separators=(",", ":")).encode()
    )
    signature = _b64(hmac.new(_key(secret, purpose), payload.encode(), hashlib.sha256).digest())
    return f"{payload}.{signature}"


def verify(secret: str, purpose: str, reference: str) -> dict[str, Any]:
    """The claims of a valid, unexpired reference; 403 otherwise (the same answer for a forged
    and an expired one but the message, so nothing is learnt from it)."""
    try:
        payload, signature = reference.split(".", 1)
        expected = _b64(hmac.new(_key(secret, purpose), payload.encode(), hashlib.sha256).digest())
        if not hmac.compare_digest(expected, signature):
            raise ValueError("bad signature")
        claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        expires = int(claims["exp"])
    except (ValueError, KeyError, TypeError):
        raise CloudletError(
            "AuthorizationFailure", "this link is not valid; ask for a new one", "signature", status=403
        ) from None
    if expires < time.time():
        raise CloudletError(
            "AuthorizationFailure", "this link has expired; ask for a new one", "signature", status=403
        )
    return claims
