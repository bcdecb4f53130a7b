"""Quota headroom for the simulator: ``domain.compute.quota.node_headroom``, the arithmetic the server's
``services.compute.quotas.headroom_for_nodes`` uses too (which reads its holders from the store), with a
short reason. A unit test checks it against ``domain.compute.quota.check_request``.
"""

from __future__ import annotations

from collections.abc import Iterable

from cloudlet.domain.compute.quota import UNLIMITED_NODES, CoreHolder, QuotaLimits, Tier, node_headroom

UNLIMITED = UNLIMITED_NODES


def headroom_nodes(
    limits: QuotaLimits,
    holders: Iterable[CoreHolder],
    compute: str,
    family: str,
    tier: Tier,
    vcpus: int,
    live_nodes: int,
) -> tuple[int, str]:
    """How many more nodes of ``vcpus`` cores ``compute`` may make now, and the binding quota."""
    room = node_headroom(limits, holders, compute, family, tier, vcpus, live_nodes)
    return room.nodes, (f"quota {room.pool} {room.used}/{room.limit} cores" if room.pool else "")
