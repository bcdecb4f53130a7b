"""C12's one eviction rule (domain/compute/eviction), used by dedicated demand, an engine's preemption, an
operator and the simulator."""

from __future__ import annotations

import pytest

from cloudlet.domain.compute.eviction import PREEMPTIBLE, Candidate, Cause, Refusal, order, refusal, victims
from cloudlet.domain.compute.nodes import NodeState


def _node(node_id: str, state: NodeState, created: float, low: bool = True, vcpus: int = 2) -> Candidate:
    return Candidate(node_id, state, low, vcpus, created)


def test_eviction_order_is_idle_first_then_youngest() -> None:
    nodes = [
        _node("old-busy", NodeState.BUSY, 1),
        _node("new-busy", NodeState.BUSY, 5),
        _node("old-idle", NodeState.IDLE, 2),
        _node("starting", NodeState.STARTING, 4),
        _node("new-idle", NodeState.IDLE, 3),
    ]
    assert [n.id for n in order(nodes)] == ["new-idle", "old-idle", "new-busy", "starting", "old-busy"]


def test_demand_takes_what_it_needs_and_no_more_of_low_priority_booted_nodes() -> None:
    nodes = [
        _node("busy", NodeState.BUSY, 1),
        _node("idle", NodeState.IDLE, 2),
        _node("dedicated", NodeState.IDLE, 9, low=False),
        _node("requested", NodeState.REQUESTED, 9),  # no vCPUs to claim yet
        _node("draining", NodeState.DRAINING, 9),  # already going away
    ]
    assert [n.id for n in victims(nodes, 2)] == ["idle"]
    assert [n.id for n in victims(nodes, 3)] == ["idle", "busy"]
    assert [n.id for n in victims(nodes, 100)] == ["idle", "busy"]
    assert victims(nodes, 0) == []


@pytest.mark.parametrize("state", list(NodeState))
def test_who_may_be_evicted_for_each_cause(state: NodeState) -> None:
    low, dedicated = _node("n", state, 1), _node("n", state, 1, low=False)
    live = state in PREEMPTIBLE
    # An engine takes back any live node, a dedicated one's placeholder included.
    assert refusal(dedicated, Cause.ENGINE) is (None if live else Refusal.NOT_LIVE)
    assert refusal(low, Cause.OPERATOR) is (None if live else Refusal.NOT_LIVE)
    # cloudlet itself takes back only low-priority nodes.
    assert refusal(dedicated, Cause.OPERATOR) is Refusal.DEDICATED
    assert refusal(dedicated, Cause.DEMAND) is Refusal.DEDICATED
    booted = state in (NodeState.STARTING, NodeState.IDLE, NodeState.BUSY)
    assert refusal(low, Cause.DEMAND) is (None if booted else Refusal.NOT_LIVE)
