"""The stuck-state table (domain/compute/nodes.py): per state, how long a node may stay (or stay quiet)
and what is done then; terminations are retried a bounded number of times, then given up."""

from __future__ import annotations

import pytest

from cloudlet.domain.compute.nodes import (
    LAUNCH_RECORD_TIMEOUT_S,
    LOST_AFTER_S,
    START_TIMEOUT_S,
    STUCK_RULES,
    TERMINATE_MAX_RETRIES,
    TERMINATE_RETRY_S,
    NodeState,
    StuckAction,
    stuck_action,
)

T0 = 1_000.0


@pytest.mark.parametrize(
    ("state", "limit", "action"),
    [
        (NodeState.REQUESTED, LAUNCH_RECORD_TIMEOUT_S, StuckAction.ADOPT_OR_FAIL),
        (NodeState.STARTING, START_TIMEOUT_S, StuckAction.SETUP_FAIL),
    ],
)
def test_time_in_state_past_its_limit_acts(state: NodeState, limit: float, action: StuckAction) -> None:
    assert stuck_action(state, T0, T0, T0 + limit) is None  # at the limit: not yet
    assert stuck_action(state, T0, T0, T0 + limit + 0.1) is action


@pytest.mark.parametrize("state", [NodeState.IDLE, NodeState.BUSY, NodeState.DRAINING])
def test_a_quiet_agent_is_lost_however_long_the_node_was_in_its_state(state: NodeState) -> None:
    long_ago = T0 - 3600
    assert stuck_action(state, long_ago, T0, T0 + LOST_AFTER_S - 1) is None  # it reported lately
    assert stuck_action(state, long_ago, T0, T0 + LOST_AFTER_S + 1) is StuckAction.LOSE


def test_terminating_is_retried_then_given_up() -> None:
    rule = STUCK_RULES[NodeState.TERMINATING]
    assert rule.give_up_after_s == rule.timeout_s + TERMINATE_RETRY_S * TERMINATE_MAX_RETRIES
    assert stuck_action(NodeState.TERMINATING, T0, T0, T0 + 0.5) is StuckAction.RETRY_TERMINATE
    last_retry = T0 + (rule.give_up_after_s or 0)
    assert stuck_action(NodeState.TERMINATING, T0, T0, last_retry) is StuckAction.RETRY_TERMINATE
    assert stuck_action(NodeState.TERMINATING, T0, T0, last_retry + 0.1) is StuckAction.GIVE_UP


@pytest.mark.parametrize(
    "state", [NodeState.TERMINATED, NodeState.LOST, NodeState.SETUP_FAILED, NodeState.ALLOCATED]
)
def test_states_without_a_rule_are_never_stuck(state: NodeState) -> None:
    assert stuck_action(state, T0, T0, T0 + 10**6) is None


def test_queued_is_gone() -> None:
    assert "queued" not in {s.value for s in NodeState}
