"""C12: dedicated demand takes capacity back from low-priority nodes in the same location (the
rule: ``domain/compute/eviction``; carried out: ``services/compute/preemption``); their machines go at
once."""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from cloudlet.control.actions import Actions, release
from cloudlet.services.compute import preemption

log = logging.getLogger("cloudlet.clusters")


def evict_low_priority(
    session: Session,
    location: str,
    for_cluster: str,
    vcpus_needed: int,
    actions: Actions,
    now: float,
) -> int:
    """Preempt low-priority nodes in LOCATION until VCPUS_NEEDED are freed; their jobs are
    requeued. Returns the vCPUs freed (the caller claims them in the same transaction)."""
    evicted, wake = preemption.evict_for_demand(session, location, for_cluster, vcpus_needed, now)
    actions.wake += wake
    for node in evicted:
        release(node, actions, now)
    freed = sum(node.vcpus for node in evicted)
    if freed:
        log.info("evicted %d low-priority vCPUs for %s", freed, for_cluster)
    return freed
