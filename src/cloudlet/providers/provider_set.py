"""Each location's provider, built from the location's configuration.

``ProviderSet`` is the ``Mapping[str, NodeProvider]`` the control loops look providers up in,
keyed by location name (a node's location says which provider made it). An instance is built
once per location and configuration and rebuilt when the configuration changes; locations are
read again at most every ``refresh_s`` seconds, so a change made through any replica is seen
without a restart. Two locations with the same provider and configuration share one instance.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from cloudlet.providers.base import NodeProvider
from cloudlet.providers.registry import ProviderContext, ProviderRegistry


@dataclass(frozen=True)
class LocationProvider:
    """A location's provider name and its (validated, stored) configuration."""

    location: str
    provider: str
    config: Mapping[str, Any] = field(default_factory=dict)

    @property
    def build_key(self) -> tuple[str, str]:
        return self.provider, json.dumps(dict(self.config), sort_keys=True)


class ProviderSet(Mapping[str, NodeProvider]):
    def __init__(
        self,
        registry: ProviderRegistry,
        context: ProviderContext,
        load: Callable[[], Iterable[LocationProvider]],
        refresh_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry, self.context = registry, context
        self._load, self._refresh_s, self._clock = load, refresh_s, clock
        self._lock = threading.Lock()
        self._locations: dict[str, LocationProvider] = {}
        self._loaded_at: float | None = None
        self._built: dict[tuple[str, str], NodeProvider] = {}

    def refresh(self) -> None:
        """Read the locations now (the next lookup would otherwise wait for ``refresh_s``)."""
        with self._lock:
            self._loaded_at = None

    def location(self, name: str) -> LocationProvider | None:
        return self._current().get(name)

    def __getitem__(self, key: str) -> NodeProvider:
        found = self._current().get(key)
        if found is None:
            found = self._fresh().get(key)  # made a moment ago, perhaps through another replica
        if found is None and key in self.registry.kinds:
            # A provider kind's own name resolves too, to that kind with its default settings.
            found = LocationProvider(key, key)
        if found is None:
            raise KeyError(f"no location '{key}' to find its nodes' provider by")
        return self._instance(found)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._current()))

    def __len__(self) -> int:
        return len(self._current())

    # -- helpers -------------------------------------------------------------------------------
    def _current(self) -> dict[str, LocationProvider]:
        with self._lock:
            stale = self._loaded_at is None or self._clock() - self._loaded_at >= self._refresh_s
        return self._fresh() if stale else self._locations

    def _fresh(self) -> dict[str, LocationProvider]:
        locations = {loc.location: loc for loc in self._load()}
        with self._lock:
            self._locations, self._loaded_at = locations, self._clock()
            live = {loc.build_key for loc in locations.values()}
            # A configuration nobody uses any more goes; default ones stay (older nodes that name
            # their provider kind resolve to them).
            for key in [k for k in self._built if k not in live and k[1] != "{}"]:
                del self._built[key]
        return locations

    def _instance(self, location: LocationProvider) -> NodeProvider:
        key = location.build_key
        with self._lock:
            built = self._built.get(key)
            if built is None:
                # The first location with this configuration names the scope of its host keys.
                context = dataclasses.replace(self.context, scope=location.location)
                built = self.registry.build(location.provider, location.config, context)
                self._built[key] = built
            return built
