"""Cluster nodes: an explicit lifecycle state machine (pure).

queued → requested → allocated → starting → idle ⇄ busy → draining → terminating → terminated,
with failure states allocation_failed, setup_failed (kept with its logs for post-mortem),
preempted, lost and unusable. Azure's node states (idle, running, preparing, leaving, preempted,
unusable) are derived for ``list-nodes``.
"""

from __future__ import annotations

from enum import StrEnum

from cloudlet.domain.errors import conflict


class NodeState(StrEnum):
    QUEUED = "queued"
    REQUESTED = "requested"
    ALLOCATED = "allocated"
    STARTING = "starting"
    IDLE = "idle"
    BUSY = "busy"
    DRAINING = "draining"
    TERMINATING = "terminating"
    TERMINATED = "terminated"
    ALLOCATION_FAILED = "allocation_failed"
    SETUP_FAILED = "setup_failed"
    PREEMPTED = "preempted"
    LOST = "lost"
    UNUSABLE = "unusable"


class NodeEvent(StrEnum):
    REQUEST = "request"  # the provider was asked for a machine
    ALLOCATE = "allocate"  # the provider says it exists
    ALLOCATION_FAIL = "allocation_fail"
    BOOT = "boot"  # the agent process is starting
    REGISTER = "register"  # the agent dialled in and registered
    SETUP_FAIL = "setup_fail"
    ASSIGN = "assign"  # a job was placed on it
    RELEASE = "release"  # its job ended
    DRAIN = "drain"  # scale-down chose it: finish, take no new work
    TERMINATE = "terminate"
    TERMINATED = "terminated"
    PREEMPT = "preempt"  # low-priority eviction
    LOSE = "lose"  # heartbeats stopped or the provider no longer knows it
    MARK_UNUSABLE = "mark_unusable"


_S, _E = NodeState, NodeEvent
TRANSITIONS: dict[tuple[NodeState, NodeEvent], NodeState] = {
    (_S.QUEUED, _E.REQUEST): _S.REQUESTED,
    (_S.REQUESTED, _E.ALLOCATE): _S.ALLOCATED,
    (_S.REQUESTED, _E.ALLOCATION_FAIL): _S.ALLOCATION_FAILED,
    (_S.ALLOCATED, _E.BOOT): _S.STARTING,
    (_S.STARTING, _E.REGISTER): _S.IDLE,
    (_S.STARTING, _E.SETUP_FAIL): _S.SETUP_FAILED,
    (_S.IDLE, _E.ASSIGN): _S.BUSY,
    (_S.BUSY, _E.RELEASE): _S.IDLE,
    (_S.IDLE, _E.DRAIN): _S.DRAINING,
    (_S.BUSY, _E.DRAIN): _S.DRAINING,
    (_S.DRAINING, _E.RELEASE): _S.DRAINING,
    (_S.DRAINING, _E.TERMINATE): _S.TERMINATING,
    (_S.TERMINATING, _E.TERMINATED): _S.TERMINATED,
}
_LIVE = (_S.REQUESTED, _S.ALLOCATED, _S.STARTING, _S.IDLE, _S.BUSY, _S.DRAINING)
for _state in _LIVE:
    TRANSITIONS[(_state, _E.PREEMPT)] = _S.PREEMPTED
    TRANSITIONS[(_state, _E.LOSE)] = _S.LOST
    TRANSITIONS[(_state, _E.MARK_UNUSABLE)] = _S.UNUSABLE
    TRANSITIONS.setdefault((_state, _E.TERMINATE), _S.TERMINATING)
for _state in (_S.QUEUED, _S.ALLOCATION_FAILED, _S.SETUP_FAILED, _S.PREEMPTED, _S.LOST, _S.UNUSABLE):
    TRANSITIONS[(_state, _E.TERMINATE)] = _S.TERMINATING

# States whose machine (may) exist and count against capacity and quota.
HOLDING = frozenset({*_LIVE, _S.TERMINATING})
# Nodes that will be usable by jobs without a new provider request.
SERVING = frozenset({_S.REQUESTED, _S.ALLOCATED, _S.STARTING, _S.IDLE, _S.BUSY})
FINAL = frozenset({_S.TERMINATED})
# Failed nodes keep their state (and logs) for post-mortem once their machine is released.
FAILED = frozenset({_S.ALLOCATION_FAILED, _S.SETUP_FAILED, _S.PREEMPTED, _S.LOST, _S.UNUSABLE})


def next_node_state(state: NodeState, event: NodeEvent, node_id: str = "") -> NodeState:
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise conflict(
            "NodeStateConflict", f"node {node_id} is {state.value}; cannot {event.value} it", node_id
        ) from None


AZURE_NODE_STATE = {
    _S.QUEUED: "preparing",
    _S.REQUESTED: "preparing",
    _S.ALLOCATED: "preparing",
    _S.STARTING: "preparing",
    _S.IDLE: "idle",
    _S.BUSY: "running",
    _S.DRAINING: "leaving",
    _S.TERMINATING: "leaving",
    _S.TERMINATED: "leaving",
    _S.ALLOCATION_FAILED: "unusable",
    _S.SETUP_FAILED: "unusable",
    _S.PREEMPTED: "preempted",
    _S.LOST: "unusable",
    _S.UNUSABLE: "unusable",
}


def azure_node_state(state: NodeState) -> str:
    return AZURE_NODE_STATE[state]
