"""Placing a node on one of a location's hosts (SSH hosts; pure).

A node is a slice of a host (the size's cores and memory) or a whole host: a size as large as the
host, or an isolated size (REQUIREMENTS T15), takes a host alone, and nothing else goes on a host
that an isolated node holds. Among the hosts that fit, the emptiest wins (nodes spread across
hosts), then the first in the configuration's order. The location's capacity is what its usable
hosts have, each counted (``total``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Slice:
    node_id: str
    vcpus: float
    memory_gb: float
    gpus: int = 0
    whole_host: bool = False


@dataclass(frozen=True)
class HostRoom:
    """A host as placement sees it: what it has, what its nodes hold, whether it is usable."""

    key: str
    cores: float
    memory_gb: float
    gpus: int = 0
    slices: tuple[Slice, ...] = field(default_factory=tuple)
    usable: bool = True
    why_not: str = ""  # why an unusable host is (unreachable, too old a Python, ...)

    @property
    def used_vcpus(self) -> float:
        return sum(s.vcpus for s in self.slices)

    @property
    def used_memory_gb(self) -> float:
        return sum(s.memory_gb for s in self.slices)

    @property
    def used_gpus(self) -> int:
        return sum(s.gpus for s in self.slices)

    @property
    def held_whole(self) -> bool:
        return any(s.whole_host for s in self.slices)


@dataclass(frozen=True)
class Total:
    cores: float
    memory_gb: float
    gpus: int
    hosts: int  # how many were usable


def total(rooms: Sequence[HostRoom]) -> Total:
    """What the usable hosts have, all added up (what nodes may be placed on: the same numbers)."""
    usable = [r for r in rooms if r.usable]
    return Total(
        sum(r.cores for r in usable),
        sum(r.memory_gb for r in usable),
        sum(r.gpus for r in usable),
        len(usable),
    )


@dataclass(frozen=True)
class Placement:
    host: str | None
    whole_host: bool
    reason: str  # why nothing fits, when host is None


def takes_whole_host(vcpus: float, isolated: bool, host: HostRoom) -> bool:
    return isolated or vcpus >= host.cores


def place(
    hosts: Sequence[HostRoom], vcpus: float, memory_gb: float, gpus: int = 0, isolated: bool = False
) -> Placement:
    """The host for a node of this size, or why none will do."""
    candidates: list[tuple[float, int, HostRoom, bool]] = []
    refusals: list[str] = []
    for order, host in enumerate(hosts):
        if not host.usable:
            refusals.append(f"{host.key}: {host.why_not or 'unusable'}")
            continue
        whole = takes_whole_host(vcpus, isolated, host)
        if host.held_whole:
            refusals.append(f"{host.key}: held whole by a node")
            continue
        if whole and host.slices:
            refusals.append(f"{host.key}: a whole-host node needs it empty ({len(host.slices)} nodes on it)")
            continue
        free_cores = host.cores - host.used_vcpus
        free_memory = host.memory_gb - host.used_memory_gb
        free_gpus = host.gpus - host.used_gpus
        if not whole and (vcpus > free_cores + 1e-9 or memory_gb > free_memory + 1e-9):
            refusals.append(
                f"{host.key}: {free_cores:g} cores and {free_memory:g} GB free, "
                f"the size needs {vcpus:g} and {memory_gb:g}"
            )
            continue
        if whole and memory_gb > host.memory_gb + 1e-9:
            refusals.append(f"{host.key}: {host.memory_gb:g} GB of memory, the size needs {memory_gb:g}")
            continue
        if gpus > free_gpus:
            refusals.append(f"{host.key}: {free_gpus} GPUs free, the size needs {gpus}")
            continue
        candidates.append((host.used_vcpus / max(host.cores, 1e-9), order, host, whole))
    if not candidates:
        detail = "; ".join(refusals) or "no hosts configured"
        return Placement(None, False, f"no SSH host has room for the node ({detail})")
    _, _, host, whole = min(candidates, key=lambda c: (c[0], c[1]))
    return Placement(host.key, whole, "")
