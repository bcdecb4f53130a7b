"""``client.locations``: pools of capacity behind one provider and its configuration (admin).

>>> lab = ml_client.locations.create_or_update("lab", "local", {"nodes_dir": "/srv/lab"})  # doctest: +SKIP
>>> [loc["name"] for loc in ml_client.locations.list()]  # doctest: +SKIP
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from typing import Any

from cloudlet.client._rest import API_PREFIX, quote_segment
from cloudlet.client.operations import _Operations


def location_body(
    provider: str | None = None,
    config: Mapping[str, Any] | None = None,
    capacity: Mapping[str, float] | None = None,
    accept_host_keys: Sequence[str] = (),
) -> dict[str, Any]:
    """The PUT body: only what is given (the server keeps the rest, or uses its defaults)."""
    body: dict[str, Any] = {}
    if provider is not None:
        body["provider"] = provider
    if config is not None:
        body["config"] = dict(config)
    if capacity:
        body["capacity"] = dict(capacity)
    if accept_host_keys:
        body["accept_host_keys"] = list(accept_host_keys)
    return body


class LocationOperations(_Operations):
    def _path(self, name: str) -> str:
        return f"{API_PREFIX}/locations/{quote_segment(name)}"

    def list(self) -> builtins.list[dict[str, Any]]:
        return self._rest.list_values(f"{API_PREFIX}/locations")

    def get(self, name: str) -> dict[str, Any]:
        return dict(self._rest.get(self._path(name)))

    def create_or_update(
        self,
        name: str,
        provider: str | None = None,
        config: Mapping[str, Any] | None = None,
        capacity: Mapping[str, float] | None = None,
        accept_host_keys: Sequence[str] = (),
    ) -> dict[str, Any]:
        """Add or change a location (admin). ``config`` replaces the provider's settings; omitted,
        they are kept (or the new provider's defaults apply). ``capacity`` changes only the fields
        given. ``accept_host_keys``: SSH hosts (``ADDRESS[:PORT]``) whose changed key to accept."""
        body = location_body(provider, config, capacity, accept_host_keys)
        return dict(self._rest.put(self._path(name), body))

    def delete(self, name: str) -> None:
        """Remove a location nothing is in (admin)."""
        self._rest.delete(self._path(name))
