"""SSH host keys: whether a host may be logged in to with the key it presents (pure).

The order a mature client uses: a key pinned in the configuration (``host_key:``, OpenSSH
public-key format) → the configured ``known_hosts`` file → trust on first use, the first key
recorded in the store (``ssh_host_keys``) and every later key compared with it. A key that differs
from the pinned or recorded one is refused, and no session is opened with it: the message names the
host, both fingerprints and the fix. asyncssh does the matching of pinned and known_hosts keys
(``providers/ssh.py`` hands it the key or the file); this module decides what is left over.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Verdict:
    trusted: bool
    source: str  # "pinned" | "known_hosts" | "recorded" | "first_use" | "changed"
    record: bool = False  # trust on first use: store this key
    error: str | None = None


def normalize(key: str) -> str:
    """``"<type> <base64>"`` of an OpenSSH public-key line (its comment dropped); ValueError when
    it is not one."""
    parts = key.strip().split()
    if len(parts) < 2 or not parts[0].replace("-", "").replace("@", "").replace(".", "").isalnum():
        raise ValueError("not an OpenSSH public key ('<type> <base64> [comment]')")
    try:
        base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("not an OpenSSH public key: its key part is not base64") from exc
    return f"{parts[0]} {parts[1]}"


def fingerprint(key: str) -> str:
    """OpenSSH's ``SHA256:…`` fingerprint of a public key (as ``ssh-keygen -lf`` prints it)."""
    blob = base64.b64decode(normalize(key).split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def describe(key: str) -> str:
    return f"{normalize(key).split()[0]} {fingerprint(key)}"


def decide(
    presented: str,
    where: str,
    fix: str,
    pinned: str | None = None,
    known_hosts: str | None = None,
    recorded: str | None = None,
    first_seen: str = "",
) -> Verdict:
    """The verdict on the key a host ``where`` (``user@address:port``) ``presented``.

    ``pinned``: the configured ``host_key``; ``known_hosts``: the configured file's path (asyncssh
    found no match for the key in it when this is asked); ``recorded``: the key the store holds
    for the host; ``fix``: what the operator runs to accept a new key."""
    shown = describe(presented)
    if pinned:
        if normalize(pinned) == normalize(presented):
            return Verdict(True, "pinned")
        message = (
            f"SSH host {where} presented {shown}, not the host_key pinned in the configuration "
            f"({describe(pinned)}); refused, no connection was made. If the host's key was changed on "
            "purpose, put its new public key (ssh-keyscan) in host_key"
        )
        return Verdict(False, "pinned", error=message)
    if known_hosts:
        message = (
            f"SSH host {where} presented {shown}, which {known_hosts} does not list for it; refused, "
            "no connection was made. Add the host's key to that known_hosts file"
        )
        return Verdict(False, "known_hosts", error=message)
    if recorded is None:
        return Verdict(True, "first_use", record=True)
    if normalize(recorded) == normalize(presented):
        return Verdict(True, "recorded")
    since = f" (first seen {first_seen})" if first_seen else ""
    message = (
        f"the SSH host key of {where} changed: it presented {shown}, but {describe(recorded)} was "
        f"recorded on first use{since}; refused, no connection was made (it may be an attacker in "
        f"between). If the host was reinstalled or its key rotated on purpose: {fix}"
    )
    return Verdict(False, "changed", error=message)
