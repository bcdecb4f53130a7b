"""``client.principals`` (users, API keys, role assignments) and ``client.audit`` (the audit log).

>>> key = ml_client.principals.create_key("alice", expires_in_days=90)  # doctest: +SKIP
>>> ml_client.principals.rotate_key("alice", key["id"])["api_key"]       # doctest: +SKIP
>>> for entry in ml_client.audit.list(action="apiKey", since="2026-12-01"):  # doctest: +SKIP
...     print(entry["time"], entry["actor"], entry["action"], entry["target"])
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx

from cloudlet.client._rest import API_PREFIX, quote_segment
from cloudlet.client.operations import _Operations

When = datetime | str


def _when(value: When | None) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else value


def _expiry(expires_in_days: int | None, expires_on: When | None) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if expires_in_days is not None:
        body["expires_in_days"] = expires_in_days
    if expires_on is not None:
        body["expires_on"] = _when(expires_on)
    return body


class PrincipalOperations(_Operations):
    """Users, their API keys and role assignments. Administrators manage any user; a user may
    list, revoke and rotate their own keys (docs/access.md)."""

    def _user(self, name: str) -> str:
        return f"{API_PREFIX}/principals/{quote_segment(name)}"

    def whoami(self) -> dict[str, Any]:
        return dict(self._rest.get(f"{API_PREFIX}/whoami"))

    def list(self) -> builtins.list[dict[str, Any]]:
        return self._rest.list_values(f"{API_PREFIX}/principals")

    def create(self, name: str, is_admin: bool = False) -> dict[str, Any]:
        return dict(self._rest.post(f"{API_PREFIX}/principals", {"name": name, "is_admin": is_admin}))

    def disable(self, name: str) -> dict[str, Any]:
        """Every key and token of the user stops working (admin)."""
        return dict(self._rest.patch(self._user(name), {"enabled": False}))

    def enable(self, name: str) -> dict[str, Any]:
        return dict(self._rest.patch(self._user(name), {"enabled": True}))

    def list_keys(self, name: str) -> builtins.list[dict[str, Any]]:
        """The user's keys: id, prefix, state, created, expires, last used, revoked (never a secret)."""
        return self._rest.list_values(f"{self._user(name)}/keys")

    def create_key(
        self, name: str, *, expires_in_days: int | None = None, expires_on: When | None = None
    ) -> dict[str, Any]:
        """A new API key for ``name`` (admin); the key (``api_key``) is only returned this once."""
        body = _expiry(expires_in_days, expires_on) or None
        return dict(self._rest.post(f"{self._user(name)}/keys", body))

    def revoke_key(self, name: str, key_id: str) -> None:
        """Revoke a key; tokens minted from it stop working too."""
        self._rest.delete(f"{self._user(name)}/keys/{quote_segment(key_id)}")

    def rotate_key(
        self,
        name: str,
        key_id: str,
        *,
        grace_minutes: int = 0,
        expires_in_days: int | None = None,
        expires_on: When | None = None,
    ) -> dict[str, Any]:
        """A new key in place of ``key_id`` (returned once, as ``api_key``); the old one stops now
        or after ``grace_minutes`` (at most 60)."""
        body = {**_expiry(expires_in_days, expires_on), "grace_minutes": grace_minutes}
        return dict(self._rest.post(f"{self._user(name)}/keys/{quote_segment(key_id)}/rotate", body))

    def _assignment(self, principal: str, workspace_name: str | None) -> str:
        return f"{self._scope.ws_path(workspace_name)}/roleAssignments/{quote_segment(principal)}"

    def assign_role(self, principal: str, role: str, workspace_name: str | None = None) -> dict[str, Any]:
        return dict(self._rest.put(self._assignment(principal, workspace_name), {"role": role}))

    def remove_role(self, principal: str, workspace_name: str | None = None) -> None:
        """The principal loses its role on the workspace (and, with no other, sight of it)."""
        self._rest.delete(self._assignment(principal, workspace_name))

    def list_role_assignments(self, workspace_name: str | None = None) -> builtins.list[dict[str, Any]]:
        return self._rest.list_values(f"{self._scope.ws_path(workspace_name)}/roleAssignments")


class AuditOperations(_Operations):
    """``client.audit``: who changed what (administrators only)."""

    def list(
        self,
        *,
        actor: str | None = None,
        action: str | None = None,
        target: str | None = None,
        since: When | None = None,
        until: When | None = None,
        top: int | None = None,
        page_size: int = 100,
        channel: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Entries newest first, following ``nextLink`` lazily; at most ``top`` of them.
        ``action`` may be a kind (``compute`` matches ``compute.create``…); ``target`` matches a
        resource and everything under it; ``channel`` the front door (``rest``, ``arm``, ``mlflow``,
        ``cli``, ``studio``)."""
        params: dict[str, Any] | None = {
            "actor": actor,
            "action": action,
            "target": target,
            "channel": channel,
            "since": _when(since),
            "until": _when(until),
        }
        path: str | None = f"{API_PREFIX}/audit"
        returned = 0
        while path is not None and (top is None or returned < top):
            size = page_size if top is None else min(page_size, top - returned)
            body = self._rest.get(path, params={**params, "$top": size} if params is not None else None)
            for entry in body.get("value") or []:
                yield entry
                returned += 1
                if top is not None and returned >= top:
                    return
            next_link = body.get("nextLink")
            # nextLink carries every filter; only its path and query are used, so a server behind a
            # proxy that names another host is still reached where this client reaches it.
            path = httpx.URL(next_link).raw_path.decode() if next_link else None
            params = None
