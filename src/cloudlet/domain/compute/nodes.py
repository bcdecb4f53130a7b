"""Cluster nodes: an explicit lifecycle state machine and its stuck-state table (pure).

requested → allocated → starting → idle ⇄ busy → draining → terminating → terminated,
with failure states allocation_failed, setup_failed (kept with its logs for post-mortem),
preempted, lost and unusable. Azure's node states (idle, running, preparing, leaving, preempted,
unusable) are derived for ``list-nodes``.

Every node records when it entered its state (``state_since``). ``STUCK_RULES`` says, per state,
how long a node may stay there (or stay quiet) before the control plane acts, and what it does,
as in Ray autoscaler v2's ``ReconcileConfig``: no registration within ``START_TIMEOUT_S`` is a
failed setup; no report within ``LOST_AFTER_S`` is a lost node; a terminate that keeps failing
is retried every ``TERMINATE_RETRY_S`` (each sweep) up to ``TERMINATE_MAX_RETRIES`` times, then
reported and left for a person.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from cloudlet.domain.errors import conflict


class NodeState(StrEnum):
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
for _state in (_S.ALLOCATION_FAILED, _S.SETUP_FAILED, _S.PREEMPTED, _S.LOST, _S.UNUSABLE):
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


# -- stuck states ------------------------------------------------------------------------------
LOST_AFTER_S = 15.0  # no report for this long: the agent is gone
START_TIMEOUT_S = 60.0  # no registration for this long after it booted: setup failed
LAUNCH_RECORD_TIMEOUT_S = 10.0  # requested, launch never recorded (a crash between): adopt or end
TERMINATE_RETRY_S = 2.0
TERMINATE_MAX_RETRIES = 30


class StuckAction(StrEnum):
    ADOPT_OR_FAIL = "adopt_or_fail"  # adopt the machine if the provider made it, else end the node
    SETUP_FAIL = "setup_fail"
    LOSE = "lose"
    RETRY_TERMINATE = "retry_terminate"
    GIVE_UP = "give_up"  # stop retrying; the node keeps its state with the error, for a person


class Measure(StrEnum):
    IN_STATE = "in_state"  # time since the node entered its state (``state_since``)
    QUIET = "quiet"  # time since its agent last reported


@dataclass(frozen=True)
class StuckRule:
    timeout_s: float
    measure: Measure
    action: StuckAction
    retry_every_s: float = 0.0
    max_retries: int = 0

    @property
    def give_up_after_s(self) -> float | None:
        """The time in the state after which retrying stops, for a rule that retries."""
        if not self.max_retries:
            return None
        return self.timeout_s + self.retry_every_s * self.max_retries


_QUIET = StuckRule(LOST_AFTER_S, Measure.QUIET, StuckAction.LOSE)
STUCK_RULES: dict[NodeState, StuckRule] = {
    _S.REQUESTED: StuckRule(LAUNCH_RECORD_TIMEOUT_S, Measure.IN_STATE, StuckAction.ADOPT_OR_FAIL),
    _S.STARTING: StuckRule(START_TIMEOUT_S, Measure.IN_STATE, StuckAction.SETUP_FAIL),
    _S.IDLE: _QUIET,
    _S.BUSY: _QUIET,
    _S.DRAINING: _QUIET,
    # Retried from the first sweep on (a call still in flight is not asked twice): a machine left
    # by a crash, or by a delete step that only marks its nodes, goes as soon as it is seen.
    _S.TERMINATING: StuckRule(
        0.0,
        Measure.IN_STATE,
        StuckAction.RETRY_TERMINATE,
        retry_every_s=TERMINATE_RETRY_S,
        max_retries=TERMINATE_MAX_RETRIES,
    ),
}


def stuck_action(state: NodeState, state_since: float, last_report: float, now: float) -> StuckAction | None:
    """What to do about a node in STATE since STATE_SINCE whose agent last reported at LAST_REPORT
    (the caller floors it at its own start: agents need a moment to find a restarted server)."""
    rule = STUCK_RULES.get(state)
    if rule is None:
        return None
    elapsed = now - (last_report if rule.measure is Measure.QUIET else state_since)
    if elapsed <= rule.timeout_s:
        return None
    give_up = rule.give_up_after_s
    if give_up is not None and elapsed > give_up:
        return StuckAction.GIVE_UP
    return rule.action
