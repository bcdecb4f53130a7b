"""C12: dedicated demand takes capacity back from low-priority nodes in the same location."""

from __future__ import annotations

import logging

from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.control.actions import Actions, release
from cloudlet.domain.nodes import NodeEvent, NodeState
from cloudlet.domain.quota import Tier
from cloudlet.services import dispatch
from cloudlet.services import nodes as node_service
from cloudlet.store.schema import Node

log = logging.getLogger("cloudlet.clusters")

_EVICTABLE = (NodeState.IDLE.value, NodeState.BUSY.value, NodeState.STARTING.value)


def eviction_order(victims: list[Node]) -> list[Node]:
    """Idle nodes first (no work lost), then the youngest (the least work lost)."""
    return sorted(victims, key=lambda n: (n.state != NodeState.IDLE.value, -(n.created_at or 0)))


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
    victims = list(
        session.scalars(
            select(Node).where(
                Node.location == location,
                Node.tier == Tier.LOW_PRIORITY.value,
                Node.state.in_(_EVICTABLE),
            )
        )
    )
    freed = 0
    for node in eviction_order(victims):
        if freed >= vcpus_needed:
            break
        node.error = {"code": "Preempted", "message": f"evicted for dedicated demand of '{for_cluster}'"}
        node_service.advance(node, NodeEvent.PREEMPT, now)
        actions.wake += dispatch.fail_runs_on_node(session, node, "preempted", now)
        release(node, actions, now)
        freed += node.vcpus
    if freed:
        log.info("evicted %d low-priority vCPUs for %s", freed, for_cluster)
    return freed
