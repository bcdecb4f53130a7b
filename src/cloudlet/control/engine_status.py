"""What a batch engine says of its nodes' machines, applied to the store (from the sweep).

A provider that ``SupportsNodeStatus`` (Slurm) tells, per listed machine, whether the engine keeps
it ``pending`` (with the engine's reason), runs it, or ``preempted`` it. Here:

- pending: the node's ``report["provider_status"]`` says so (``list-nodes`` shows the message);
  a starting node's boot clock does not run meanwhile (``NodeRecorder`` skips its start timeout,
  and the clock restarts when the engine runs it);
- running: the pending note is replaced; the start timeout counts from now;
- preempted: the node is evicted like a low-priority node cloudlet preempts itself (its jobs are
  requeued and resume from their checkpoints) and its machine released (``scancel``).
Only changes are written.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.control.actions import Actions, record_failure, release
from cloudlet.control.loop import one_item
from cloudlet.domain.compute.nodes import NodeState
from cloudlet.providers.base import NodeStatus
from cloudlet.services.compute import preemption
from cloudlet.store.schema import Node

STATUS_KEY = "provider_status"


def provider_status(node: Node) -> dict[str, Any]:
    status = (node.report or {}).get(STATUS_KEY)
    return status if isinstance(status, dict) else {}


def engine_pending(node: Node) -> bool:
    return provider_status(node).get("phase") == "pending"


def apply_statuses(
    sessions: sessionmaker[Session], location: str, statuses: Mapping[str, NodeStatus], now: float
) -> Actions:
    """Record STATUSES (node id -> the engine's word) on LOCATION's nodes; what to carry out after."""
    actions = Actions()
    if not statuses:
        return actions
    with sessions.begin() as session:
        rows = session.scalars(select(Node).where(Node.location == location, Node.id.in_(list(statuses))))
        for node in rows:
            status = statuses[node.id]
            if status.phase != "preempted":
                _note(node, status, now)  # one column of its own: nothing to fail or undo
                continue
            # Requeuing its jobs writes many rows: each node is its own (one that fails says so
            # on itself, the others go on).
            failed = partial(record_failure, node, actions, actions.mark())
            with one_item(f"applying the engine's preemption of node {node.id}", session, failed):
                _preempted(session, node, status, actions, now)
    return actions


def _preempted(session: Session, node: Node, status: NodeStatus, actions: Actions, now: float) -> None:
    actions.wake += preemption.engine_preempted(session, node, status.message, now)
    if NodeState(node.state) is NodeState.PREEMPTED:
        release(node, actions, now)  # no-op once its machine is released


def _note(node: Node, status: NodeStatus, now: float) -> None:
    before = provider_status(node)
    after = {"phase": status.phase, "reason": status.reason, "message": status.message}
    if before == after or (status.phase == "running" and not before):
        return
    node.report = {**(node.report or {}), STATUS_KEY: after}
    started = before.get("phase") == "pending" and node.state == NodeState.STARTING.value
    if status.phase == "running" and started:
        node.state_since = now  # the boot clock starts when the engine runs the machine
