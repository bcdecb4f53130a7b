"""What a reconcile pass decided to do once its transaction commits."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from cloudlet.domain.nodes import FAILED, NodeEvent, NodeState
from cloudlet.providers.base import NodeRequest
from cloudlet.services import nodes as node_service
from cloudlet.store.schema import Node


@dataclass
class Launch:
    node_id: str
    request: NodeRequest
    provider: str


@dataclass
class Actions:
    launches: list[Launch] = field(default_factory=list)
    terminations: list[tuple[str, str, dict[str, object]]] = field(default_factory=list)  # id, provider, ref
    wake: list[str] = field(default_factory=list)
    deliveries: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # node id, run spec


def release(node: Node, actions: Actions, now: float | None = None) -> None:
    """Give a node's machine back. A healthy node drains and terminates; a failed one keeps its
    state (lost, preempted, setup_failed …) for post-mortem and only loses its machine."""
    now = now or time.time()
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
    actions.terminations.append((node.id, node.provider, dict(node.provider_ref)))
    actions.wake.append(node.id)
