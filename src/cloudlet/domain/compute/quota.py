"""Core quotas per location (I9, C5, C8, T12) as pure functions.

Instances and cluster nodes draw from one pool. An instance holds its cores whether running or
stopped (stopping never releases quota, so it can always start again). A cluster holds
``max(current, target)`` nodes: the nodes it has and the ones it is about to make.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from cloudlet.domain.errors import CloudletError

TOTAL_DEDICATED = "totalDedicatedCores"
TOTAL_LOW_PRIORITY = "totalLowPriorityCores"


class Tier(StrEnum):
    DEDICATED = "dedicated"
    LOW_PRIORITY = "low_priority"


@dataclass(frozen=True)
class QuotaLimits:
    families: Mapping[str, int]
    total_dedicated: int
    total_low_priority: int

    def family_limit(self, family: str) -> int:
        return self.families.get(family, 0)


@dataclass(frozen=True)
class CoreHolder:
    """One compute's claim on the pool."""

    compute: str
    workspace: str
    family: str
    tier: Tier
    cores: int
    state: str
    kind: str = ""  # what holds the cores: a compute type, "online deployment", "serverless job"
    owner: str = ""  # who the holder belongs to: an instance's owner, else who created it


@dataclass(frozen=True)
class CoreRequest:
    compute: str
    family: str
    tier: Tier
    cores_per_node: int
    nodes: int
    reason: str  # e.g. "min_instances" or "instance"

    @property
    def cores(self) -> int:
        return self.cores_per_node * self.nodes


@dataclass(frozen=True)
class UsageLine:
    name: str
    kind: str
    current_value: int
    limit: int
    holders: list[CoreHolder] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "kind": self.kind,
            "current_value": self.current_value,
            "limit": self.limit,
            "unit": "Cores",
            "holders": [
                {"compute": h.compute, "workspace": h.workspace, "cores": h.cores, "state": h.state}
                for h in self.holders
            ],
        }


def usage_report(limits: QuotaLimits, holders: Iterable[CoreHolder]) -> list[UsageLine]:
    held = [h for h in holders if h.cores > 0]
    dedicated = [h for h in held if h.tier is Tier.DEDICATED]
    low = [h for h in held if h.tier is Tier.LOW_PRIORITY]
    lines = [
        UsageLine(TOTAL_DEDICATED, "total_dedicated", _sum(dedicated), limits.total_dedicated, dedicated),
        UsageLine(TOTAL_LOW_PRIORITY, "total_low_priority", _sum(low), limits.total_low_priority, low),
    ]
    for family in sorted(set(limits.families) | {h.family for h in dedicated}):
        mine = [h for h in dedicated if h.family == family]
        lines.append(UsageLine(family, "family", _sum(mine), limits.family_limit(family), mine))
    return lines


def check_request(limits: QuotaLimits, holders: Iterable[CoreHolder], request: CoreRequest) -> None:
    """Raise a typed error naming who holds the quota when ``request`` does not fit."""
    others = [h for h in holders if h.compute != request.compute and h.cores > 0]
    if request.tier is Tier.LOW_PRIORITY:
        pool = [h for h in others if h.tier is Tier.LOW_PRIORITY]
        _fit(request, pool, limits.total_low_priority, TOTAL_LOW_PRIORITY)
        return
    pool = [h for h in others if h.tier is Tier.DEDICATED]
    _fit(
        request,
        [h for h in pool if h.family == request.family],
        limits.family_limit(request.family),
        request.family,
    )
    _fit(request, pool, limits.total_dedicated, TOTAL_DEDICATED)


def _fit(request: CoreRequest, pool: list[CoreHolder], limit: int, quota_name: str) -> None:
    used = _sum(pool)
    if request.cores <= limit - used:
        return
    holders = ", ".join(
        f"{h.compute}{' ' + h.state.lower() if h.state.lower() == 'stopped' else ''}: {h.cores}" for h in pool
    )
    code, what = (
        ("ClusterMinNodesExceedCoreQuota", f"min_instances {request.nodes} × {request.cores_per_node} cores")
        if request.reason == "min_instances"
        else ("ComputeExceedsCoreQuota", f"{request.reason} needs {request.cores} cores")
    )
    if limit == 0:
        hint = f"{quota_name} has no quota here (GPU and special series start at 0): ask for an increase"
    else:
        hint = "free cores (delete or shrink a holder) or raise the quota"
    raise CloudletError(
        code=code,
        message=(
            f"{what} > {limit} − {used} used"
            + (f" ({holders})" if holders else "")
            + f" in quota {quota_name}; {hint} with `cloudlet quota set --name {quota_name} --limit N`."
        ),
        target=request.reason if request.reason == "min_instances" else "size",
        status=400,
        details=[{"quota": quota_name, "limit": limit, "used": used, "requested": request.cores}],
    )


def _sum(holders: Iterable[CoreHolder]) -> int:
    return sum(h.cores for h in holders)


UNLIMITED_NODES = 1 << 30


@dataclass(frozen=True)
class NodeHeadroom:
    """How many more nodes fit, and the quota pool that binds: its name, cores used (others' and
    the compute's own live nodes), limit, and the other holders in it."""

    nodes: int
    pool: str = ""
    used: int = 0
    limit: int = 0
    mine: int = 0
    holders: tuple[CoreHolder, ...] = ()


def node_headroom(
    limits: QuotaLimits,
    holders: Iterable[CoreHolder],
    compute: str | None,
    family: str,
    tier: Tier,
    vcpus: int,
    live_nodes: int,
) -> NodeHeadroom:
    """How many more nodes of ``vcpus`` cores ``compute`` may make now. A dedicated node must fit
    its family's quota and the total dedicated quota; a low-priority one the low-priority total.
    (The server and the what-if simulator share this arithmetic.)"""
    others = [h for h in holders if h.compute != compute and h.cores > 0]
    mine = live_nodes * vcpus
    if tier is Tier.LOW_PRIORITY:
        pools = [(TOTAL_LOW_PRIORITY, limits.total_low_priority, [h for h in others if h.tier is tier])]
    else:
        dedicated = [h for h in others if h.tier is Tier.DEDICATED]
        pools = [
            (family, limits.family_limit(family), [h for h in dedicated if h.family == family]),
            (TOTAL_DEDICATED, limits.total_dedicated, dedicated),
        ]
    best = NodeHeadroom(UNLIMITED_NODES)
    for name, limit, pool in pools:
        used = sum(h.cores for h in pool)
        fits = max(0, (limit - used - mine) // vcpus) if vcpus else UNLIMITED_NODES
        if fits < best.nodes:
            best = NodeHeadroom(fits, name, used + mine, limit, mine, tuple(pool))
    return best
