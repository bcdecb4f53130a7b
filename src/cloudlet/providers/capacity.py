"""A location's capacity: the engine's word when its provider owns its capacity (``CapacityOwner``),
else what the administrator stored on the location (vCPUs × overcommit). Pure: the autoscaler's
``_capacity`` asks ``location_capacity`` and counts nodes with ``free_nodes``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from cloudlet.providers.base import CapacityOwner, ProviderError


class HasCapacity(Protocol):
    """A location row (``store.schema.Location``) or anything with its stored capacity."""

    @property
    def capacity(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class LocationCapacity:
    vcpus: float  # what may be placed: overcommit already applied
    memory_gb: float
    gpus: float
    source: Literal["location", "provider"]
    note: str = ""  # why the stored capacity was used although the provider owns its capacity


def location_capacity(location: HasCapacity | None, provider: object | None) -> LocationCapacity:
    """The engine's offer if ``provider`` is a ``CapacityOwner`` that answers (it enforces its own
    limits, so no overcommit), else the stored capacity scaled by its overcommit."""
    note = ""
    if isinstance(provider, CapacityOwner):
        try:
            offer = provider.capacity()
        except ProviderError as exc:
            note = f"the provider could not say its capacity ({exc}); using the location's"
        else:
            return LocationCapacity(offer.vcpus, offer.memory_gb, offer.gpus, "provider")
    stored = location.capacity if location is not None else {}
    overcommit = float(stored.get("overcommit", 1.0))
    return LocationCapacity(
        float(stored.get("vcpus", 0)) * overcommit,
        float(stored.get("memory_gb", 0)) * overcommit,
        float(stored.get("gpus", 0)),
        "location",
        note,
    )


def free_nodes(
    capacity: LocationCapacity, used_vcpus: float, node_vcpus: float, location: str
) -> tuple[int, str]:
    """How many more nodes of ``node_vcpus`` fit, and the reason shown when that is too few."""
    free = int((capacity.vcpus - used_vcpus) // node_vcpus) if node_vcpus else 0
    reason = f"location {location} capacity {used_vcpus:g}/{capacity.vcpus:g} vCPUs in use"
    if capacity.source == "provider":
        reason += " (as its provider reports)"
    elif capacity.note:
        reason += f"; {capacity.note}"
    return max(0, free), reason
