"""Evicting a node, the one way (C12), whichever cause: dedicated demand taking capacity back
(``control/eviction.py``), a node's engine taking its machine back (Slurm preempting a
placeholder), an operator. ``domain/compute/eviction`` decides; here the decision is carried out: the
node is ``preempted``, its runs end as preempted, so their jobs are requeued and resume from
their checkpoints. Its machine is released by the caller or by the cluster's next pass (failed
nodes keep their record, lose their machine).

An engine's preemption is said by two things, whichever comes first: the node's agent, whose
runs the engine's SIGTERM ended (it reports them with reason ``preempted``: ``agent/runner.py``),
and the provider's listing (``SupportsNodeStatus``), read by the sweep
(``control/engine_status.py``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.domain.compute import eviction
from cloudlet.domain.compute.eviction import Cause
from cloudlet.domain.compute.nodes import NodeEvent, NodeState
from cloudlet.domain.compute.quota import Tier
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs.run_state import ExitReason
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.core import effects
from cloudlet.services.jobs import exits
from cloudlet.store.schema import Compute, Node

PREEMPTED = ExitReason.PREEMPTED  # the run exit reason an agent reports for its node's preemption


def candidate(node: Node) -> eviction.Candidate:
    return eviction.Candidate(
        node.id,
        NodeState(node.state),
        node.tier == Tier.LOW_PRIORITY.value,
        int(node.vcpus or 0),
        float(node.created_at or 0),
    )


def evict(session: Session, node: Node, message: str, now: float) -> list[str]:
    """Carry out an eviction the rule allowed: the node ids to wake."""
    node.error = {"code": "Preempted", "message": message}
    node_service.advance(node, NodeEvent.PREEMPT, now)
    return [*exits.fail_runs_on_node(session, node, PREEMPTED, now), node.id]


def engine_preempted(session: Session, node: Node, message: str, now: float) -> list[str]:
    """Evict NODE (if it is still live) with MESSAGE; the node ids to wake."""
    if eviction.refusal(candidate(node), Cause.ENGINE) is not None:
        return []
    return evict(session, node, message, now)


def evict_for_demand(
    session: Session, location: str, for_cluster: str, vcpus_needed: int, now: float
) -> tuple[list[Node], list[str]]:
    """Take low-priority nodes in LOCATION back until VCPUS_NEEDED are freed: the nodes evicted
    (their machines are the caller's to release) and the node ids to wake."""
    live = session.scalars(
        select(Node).where(
            Node.location == location,
            Node.tier == Tier.LOW_PRIORITY.value,
            Node.state.in_([s.value for s in eviction.FOR_DEMAND]),
        )
    )
    by_id = {node.id: node for node in live}
    chosen = [by_id[c.id] for c in eviction.victims([candidate(n) for n in by_id.values()], vcpus_needed)]
    wake: list[str] = []
    for node in chosen:
        wake += evict(session, node, f"evicted for dedicated demand of '{for_cluster}'", now)
    return chosen, wake


def operator_evicts(session: Session, compute: Compute, node_id: str, now: float) -> dict[str, Any]:
    """An operator evicts a low-priority node of COMPUTE (C12; tests use it too), committed: the
    node's view. 404 when the compute has no such node, 409 when the rule refuses."""
    node = session.get(Node, node_id)
    if node is None or node_service.compute_of(node) != compute.id:
        raise CloudletError(
            "NodeNotFound",
            f"'{compute.name}' has no node '{node_id}'; see `cloudlet compute list-nodes`",
            "node_id",
            404,
        )
    refused = eviction.refusal(candidate(node), Cause.OPERATOR)
    if refused is eviction.Refusal.DEDICATED:
        raise CloudletError(
            "NotLowPriority",
            f"node {node_id} is dedicated; only low-priority nodes are evicted",
            "node_id",
            409,
        )
    if refused is not None:
        raise CloudletError(
            "NodeNotLive",
            f"node {node_id} is {node.state}: it holds no machine to take back",
            "node_id",
            409,
        )
    effects.wake_nodes(session, [*evict(session, node, "evicted by an operator", now), node.id])
    effects.demand_changed(session)  # its jobs are queued again
    shown = node_service.render(node)
    session.commit()
    return shown
