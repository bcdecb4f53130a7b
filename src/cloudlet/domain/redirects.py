"""Where a sign-in may send the browser afterwards (pure): a ``next`` taken from a request is only
ever a path beneath one of this server's own prefixes (the studio's ``/studio/``, the instance
proxy's ``/instances/``), never another site — no open redirect."""

from __future__ import annotations

import urllib.parse

MAX_TARGET_CHARS = 2048


def local_target(target: str | None, under: str) -> str | None:
    """TARGET when it is a path (and query) beneath UNDER (a prefix ending in ``/``) on this
    server, else None. Refused: a scheme or host (``https://evil.example/``, ``//evil.example``),
    a backslash or a control character or space (browsers drop tabs and newlines and read ``\\``
    as ``/``), an empty or dot segment, raw or percent-encoded (``/studio/../api`` and
    ``/studio/%2e%2e/api`` leave the prefix once the browser resolves them), a fragment."""
    if not target or len(target) > MAX_TARGET_CHARS:
        return None
    if "\\" in target or any(ord(c) <= 0x20 or ord(c) == 0x7F for c in target):
        return None
    parts = urllib.parse.urlsplit(target)
    if parts.scheme or parts.netloc or parts.fragment or not parts.path.startswith(under):
        return None
    decoded = urllib.parse.unquote(parts.path)
    if "\\" in decoded or any(seg in (".", "..") for seg in decoded.split("/")):
        return None
    if "//" in parts.path or "//" in decoded:
        return None
    return target
