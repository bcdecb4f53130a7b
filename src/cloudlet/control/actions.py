"""What a reconcile pass decided to do once its transaction commits."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from cloudlet.domain.compute.nodes import FAILED, NodeEvent, NodeState
from cloudlet.domain.errors import failure_text
from cloudlet.providers.base import NodeHandle, NodeProvider, NodeRequest
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.core.clock import WALL_CLOCK, Clock
from cloudlet.store.schema import Node

log = logging.getLogger("cloudlet.nodes")


@dataclass
class Launch:
    node_id: str
    request: NodeRequest
    location: str  # whose provider makes it (ProviderSet is keyed by location)


@dataclass
class Actions:
    launches: list[Launch] = field(default_factory=list)
    terminations: list[tuple[str, str, dict[str, object]]] = field(default_factory=list)  # id, provider, ref
    wake: list[str] = field(default_factory=list)
    deliveries: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # node id, run spec

    def mark(self) -> tuple[int, int, int]:
        """Where the lists end now, to ``rewind`` to when the work after it is rolled back."""
        return len(self.launches), len(self.terminations), len(self.wake)

    def rewind(self, mark: tuple[int, int, int]) -> None:
        del self.launches[mark[0] :], self.terminations[mark[1] :], self.wake[mark[2] :]


RECORD_FAILED = "ReconcileFailed"


def record_failure(node: Node, actions: Actions, mark: tuple[int, int, int], exc: Exception) -> None:
    """A pass failed on NODE (its writes undone): forget what it queued after MARK and say why
    on the node (``list-nodes`` shows it); the pass went on with the others."""
    actions.rewind(mark)
    node.error = {
        "code": RECORD_FAILED,
        "message": f"the control loop could not record this node: {failure_text(exc)}",
    }


def release(node: Node, actions: Actions, now: float) -> None:
    """Give a node's machine back. A healthy node drains and terminates; a failed one keeps its
    state (lost, preempted, setup_failed …) for post-mortem and only loses its machine."""
    if NodeState(node.state) in FAILED:
        if node.ended_at is not None:
            return
        node.ended_at = now
    elif node.state in (NodeState.TERMINATING.value, NodeState.TERMINATED.value):
        return
    else:
        if node.state == NodeState.IDLE.value:
            node_service.advance(node, NodeEvent.DRAIN, now)
        node_service.advance(node, NodeEvent.TERMINATE, now)
    actions.terminations.append((node.id, node.location, dict(node.provider_ref)))
    actions.wake.append(node.id)


def launch_node(
    providers: Mapping[str, NodeProvider],
    sessions: sessionmaker[Session],
    provider: str,
    request: NodeRequest,
    clock: Clock = WALL_CLOCK,
) -> None:
    """Call the provider (outside any transaction), then record what it made. A refusal is
    recorded on the node (allocation failed); whoever wanted the node decides what follows."""
    try:
        handle = providers[provider].create(request)
    except Exception as exc:
        log.warning("node %s: provider failed: %s", request.node_id, exc)
        with sessions.begin() as session:
            node = session.get(Node, request.node_id)
            if node is not None and node.state == NodeState.REQUESTED.value:
                node.error = {"code": "AllocationFailed", "message": str(exc)}
                node_service.advance(node, NodeEvent.ALLOCATION_FAIL, clock.now())
        return
    with sessions.begin() as session:
        node = session.get(Node, request.node_id)
        if node is None:
            return
        node.provider_ref = dict(handle.provider_ref)  # even if its agent registered first
        if node.state == NodeState.REQUESTED.value:
            now = clock.now()
            node_service.advance(node, NodeEvent.ALLOCATE, now)
            node_service.advance(node, NodeEvent.BOOT, now)


def terminate_node(
    providers: Mapping[str, NodeProvider],
    sessions: sessionmaker[Session],
    node_id: str,
    provider: str,
    ref: dict[str, object],
    clock: Clock = WALL_CLOCK,
) -> None:
    """Stop the node's machine, then record it terminated; a failed call is retried by the sweep."""
    if ref:
        try:
            providers[provider].terminate(NodeHandle(node_id=node_id, provider_ref=dict(ref)))
        except Exception:
            log.exception("node %s: terminate failed; the sweep retries", node_id)
            return
    with sessions.begin() as session:
        node = session.get(Node, node_id)
        if node is not None and node.state == NodeState.TERMINATING.value:
            node_service.advance(node, NodeEvent.TERMINATED, clock.now())
