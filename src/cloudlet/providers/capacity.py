"""A location's capacity: the engine's word when its provider owns its capacity (``CapacityOwner``),
else what the administrator stored on the location (vCPUs × overcommit).

The engine is asked on the provider's workers (the sweep, ``ask_capacity``) and its answer kept in
``CapacityReadings``; the autoscaler's pass reads the latest reading (``location_capacity``, pure)
and counts nodes with ``free_nodes``: a pass never calls a provider."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from cloudlet.providers.base import Capacity, CapacityOwner, ProviderError


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


@dataclass(frozen=True)
class CapacityReading:
    """What an engine said of its capacity, and when: an offer, or why it could not say."""

    offer: Capacity | None
    error: str
    at: float


# An engine's answer older than this is not trusted (its sweep stopped answering): the stored
# capacity is used, with a note.
READING_STALE_S = 30.0


def ask_capacity(provider: object, now: float) -> CapacityReading | None:
    """Ask ``provider`` for its offer if it owns its capacity (on its workers: it may be slow);
    None for a provider that does not."""
    if not isinstance(provider, CapacityOwner):
        return None
    try:
        return CapacityReading(provider.capacity(), "", now)
    except ProviderError as exc:
        return CapacityReading(None, str(exc), now)


class CapacityReadings:
    """The latest reading per location, written by the sweep's workers, read by passes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._readings: dict[str, CapacityReading] = {}

    def record(self, location: str, reading: CapacityReading | None) -> None:
        with self._lock:
            if reading is None:
                self._readings.pop(location, None)
            else:
                self._readings[location] = reading

    def get(self, location: str) -> CapacityReading | None:
        with self._lock:
            return self._readings.get(location)


def location_capacity(
    location: HasCapacity | None, reading: CapacityReading | None, now: float = 0.0
) -> LocationCapacity:
    """The engine's offer if its latest ``reading`` has one and is fresh (the engine enforces its
    own limits, so no overcommit), else the stored capacity scaled by its overcommit, with a note
    saying why the engine's word was not used."""
    note = ""
    if reading is not None:
        if reading.offer is None:
            note = f"the provider could not say its capacity ({reading.error}); using the location's"
        elif now - reading.at > READING_STALE_S:
            age = now - reading.at
            note = f"the provider has not said its capacity for {age:.0f} s; using the location's"
        else:
            offer = reading.offer
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
