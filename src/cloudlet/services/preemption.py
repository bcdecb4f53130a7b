"""A node whose engine took its machine back (Slurm preempting a placeholder): the same eviction
as cloudlet's own low-priority preemption (``control/eviction.py``): the node is ``preempted``, its
runs end as preempted, so their jobs are requeued and resume from their checkpoints. Its machine
is then released by the cluster's next pass (failed nodes keep their record, lose their machine).

Two things say so, whichever comes first: the node's agent, whose runs the engine's SIGTERM ended
(it reports them with reason ``preempted``: ``agent/runner.py``), and the provider's listing
(``SupportsNodeStatus``), read by the sweep (``control/engine_status.py``)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from cloudlet.domain.nodes import NodeEvent, NodeState
from cloudlet.services import dispatch
from cloudlet.services import nodes as node_service
from cloudlet.store.schema import Node

PREEMPTED = "preempted"  # the run exit reason an agent reports for its node's preemption
_S = NodeState
PREEMPTIBLE = frozenset({_S.REQUESTED, _S.ALLOCATED, _S.STARTING, _S.IDLE, _S.BUSY, _S.DRAINING})


def engine_preempted(session: Session, node: Node, message: str, now: float) -> list[str]:
    """Evict NODE (if it is still live) with MESSAGE; the node ids to wake."""
    if NodeState(node.state) not in PREEMPTIBLE:
        return []
    node.error = {"code": "Preempted", "message": message}
    node_service.advance(node, NodeEvent.PREEMPT, now)
    return [*dispatch.fail_runs_on_node(session, node, PREEMPTED, now), node.id]
