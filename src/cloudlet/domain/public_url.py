"""The server's public URL (``cloudlet server --public-url``, ``CLOUDLET_PUBLIC_URL``): the base of
every absolute link the server hands out (a job's studio page, an instance's apps, a sign-in link,
an online endpoint's scoring URI, a notification's link), where the address it is bound to is not
the address people reach it at (``--host 0.0.0.0``, a reverse proxy, a TLS terminator).

Only an origin (scheme, host, port): every page, redirect and form of the studio and of the
instance proxy names absolute paths (``/studio/…``, ``/signin``, ``/instances/…``), so a server
mounted under a path prefix would hand out links that leave the prefix. A path is refused rather
than half carried."""

from __future__ import annotations

import ipaddress
import urllib.parse

EXAMPLE = "https://cloudlet.example.com"


def parse(value: str) -> str:
    """VALUE as the links' base, ``scheme://host[:port]`` (no trailing slash), or ValueError saying
    what is wrong with it."""
    text = value.strip()
    if not text:
        raise ValueError("it is empty")
    parts = urllib.parse.urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise ValueError(f"{value!r} is not an http:// or https:// URL")
    try:
        host, port = parts.hostname, parts.port  # .port raises on a port that is not a number
    except ValueError:
        raise ValueError(f"{value!r} has a port that is not a number from 0 to 65535") from None
    if not host:
        raise ValueError(f"{value!r} names no host")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"{value!r} carries a user name or password; links must not")
    if parts.query or parts.fragment or text.endswith(("?", "#")):
        raise ValueError(f"{value!r} has a query or fragment; give only scheme, host and port")
    if parts.path.strip("/"):
        raise ValueError(
            f"{value!r} has a path ({parts.path}); the server's links cannot live under a path "
            "prefix: serve it at the root of its own host name or port"
        )
    return f"{scheme}://{_netloc(host, port)}"


def _netloc(host: str, port: int | None) -> str:
    shown = f"[{host}]" if ":" in host else host.lower()  # an IPv6 literal keeps its brackets
    return f"{shown}:{port}" if port is not None else shown


def host(url: str) -> str:
    """URL's host (an IPv6 literal without its brackets): a name its TLS certificate must carry."""
    return urllib.parse.urlsplit(url).hostname or ""


def is_wildcard(bind_host: str) -> bool:
    """Whether BIND_HOST listens on every address (so no link built from it reaches the server
    from elsewhere)."""
    if bind_host in ("", "*"):
        return True
    try:
        return ipaddress.ip_address(bind_host).is_unspecified
    except ValueError:
        return False


_DEFAULT_PORTS = {"http": 80, "https": 443}


def is_its_origin(public: str, origin: str) -> bool:
    """Whether a browser's ORIGIN header names the public URL PUBLIC (``parse``'s): a page the
    server served through its reverse proxy, whatever ``Host`` the proxy passes on (nginx's
    default is the upstream's address). A default port is the same as none."""
    if not public or not origin:
        return False

    def key(url: str) -> tuple[str, str, int | None] | None:
        try:
            parts = urllib.parse.urlsplit(url.strip())
            scheme = parts.scheme.lower()
            return scheme, (parts.hostname or "").lower(), parts.port or _DEFAULT_PORTS.get(scheme)
        except ValueError:  # a port that is not a number
            return None

    mine = key(public)
    return mine is not None and mine[1] != "" and key(origin) == mine
