"""The sizes a new compute may take, each with the quota left for its family and how many nodes of
it fit there: what the studio's create form offers (sizes that do not fit are shown but cannot be
picked; a cluster's size that fits fewer nodes than its maximum is picked with a note)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from cloudlet.domain.compute.quota import Tier, node_headroom
from cloudlet.domain.compute.sizes import Catalogue
from cloudlet.services.compute import quotas


@dataclass(frozen=True)
class SizeChoice:
    name: str
    family: str
    vcpus: int
    memory_gb: float
    gpus: int
    gpu_model: str | None
    price: float  # per hour, at the tier asked for
    cores_left: int  # in the pool that binds (the family's, the dedicated or the low-priority total)
    nodes_fit: int  # nodes of this size the quota left holds, at most the nodes asked for
    fits: bool  # the nodes the create needs fit (an instance: one; a cluster: min_instances, at least one)
    why_not: str  # in words, when it does not fit
    note: str  # in words, when it fits but fewer nodes than a cluster's maximum


def choices(
    session: Session,
    subscription_id: str,
    location: str,
    catalogue: Catalogue,
    compute_type: str,
    tier: Tier = Tier.DEDICATED,
    min_nodes: int = 1,
    max_nodes: int = 1,
) -> list[SizeChoice]:
    """The catalogue's current sizes for COMPUTE_TYPE in LOCATION's quota pool, smallest first.

    Nodes are counted by the arithmetic the autoscaler grows a cluster by (``quota.node_headroom``):
    a dedicated node must fit its family's quota and the dedicated total, a low-priority one the
    low-priority total. A size fits when MIN_NODES of it do (the create's own quota check asks for
    a cluster's min_instances; at least one, or the compute could run nothing); a cluster whose
    MAX_NODES do not all fit gets a note saying how many will."""
    limits = quotas.limits(session, subscription_id, location, catalogue)
    holders = quotas.holders(session, subscription_id, location, catalogue)
    needed = max(1, min_nodes)
    wanted = max(needed, max_nodes)
    low = tier is Tier.LOW_PRIORITY
    out: list[SizeChoice] = []
    for size in catalogue.list_sizes(compute_type):
        if low and not size.low_priority_capable:
            continue
        room = node_headroom(limits, holders, None, size.family, tier, size.vcpus, 0)
        left = max(0, room.limit - room.used)
        nodes = min(room.nodes, wanted)
        fits = nodes >= needed
        why, note = "", ""
        if not fits:
            what = f"{size.vcpus} cores" if needed == 1 else f"{needed * size.vcpus} cores for {needed} nodes"
            why = f"needs {what}; {left} left in {room.pool}"
        elif nodes < wanted:
            note = f"{nodes} of {wanted} nodes fit: {left} cores left in {room.pool}"
        price = (size.price_low_priority or 0.0) if low else size.price_dedicated
        out.append(
            SizeChoice(
                size.name,
                size.family,
                size.vcpus,
                size.memory_gb,
                size.gpus,
                size.gpu_model,
                price,
                left,
                nodes,
                fits,
                why,
                note,
            )
        )
    return sorted(out, key=lambda c: (c.gpus, c.vcpus, c.memory_gb, c.name))
