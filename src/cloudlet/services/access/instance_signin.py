"""The instance proxy's sign-in cookie (``cloudlet_signin``): a token for the caller, signed with a
key derived for cookies only, so it is no API credential. The proxy's own sign-in form and the
studio (which gives a signed-in user the same cookie, so JupyterLab opens in one click) mint it
here; the proxy checks it as it checks an access token (its key still valid, its user enabled)."""

from __future__ import annotations

import hashlib
import hmac

from sqlalchemy.orm import Session

from cloudlet.services.access import identity
from cloudlet.services.core.context import Caller

COOKIE = "cloudlet_signin"
COOKIE_PATH = "/instances/"
LIFETIME_S = 8 * 3600  # a working day; signing in again is one form


def cookie_secret(token_secret: str) -> str:
    """Sign-in cookies are signed with their own key: a cookie is not an API bearer token."""
    return hmac.new(token_secret.encode(), b"cloudlet-signin-cookie", hashlib.sha256).hexdigest()


def mint(session: Session, caller: Caller, token_secret: str) -> tuple[str, int]:
    """The cookie's value for CALLER, tied to the API key behind its credential (revoking the key
    ends it), and its lifetime in seconds."""
    value, _ = identity.mint_for(session, caller, cookie_secret(token_secret), LIFETIME_S)
    return value, LIFETIME_S
