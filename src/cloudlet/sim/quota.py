"""Quota headroom over ``domain.quota`` types, for the simulator.

The same arithmetic as ``services.quotas.headroom_for_nodes`` (which reads its holders from the
store): a cluster holds ``max(machines, min_instances)`` nodes' cores; a dedicated cluster must fit
both its family quota and the total dedicated quota, a low-priority one the low-priority total.
``tests/unit/test_sim_quota.py`` checks it against ``domain.quota.check_request``.
"""

from __future__ import annotations

from collections.abc import Iterable

from cloudlet.domain.quota import TOTAL_DEDICATED, TOTAL_LOW_PRIORITY, CoreHolder, QuotaLimits, Tier

UNLIMITED = 1 << 30


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
    best, reason = UNLIMITED, ""
    for name, limit, pool in pools:
        used = sum(h.cores for h in pool)
        fits = max(0, (limit - used - mine) // vcpus) if vcpus else UNLIMITED
        if fits < best:
            best, reason = fits, f"quota {name} {used + mine}/{limit} cores"
    return best, reason
