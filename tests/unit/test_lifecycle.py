"""Unit tests for the compute state machines (pure)."""

from __future__ import annotations

import pytest

from cloudlet.domain.compute.lifecycle import (
    INSTANCE_TRANSITIONS,
    AllocationState,
    InstanceEvent,
    InstanceState,
    advance_instance,
    allocation_state,
    cluster_target_nodes,
    next_instance_state,
)
from cloudlet.domain.errors import CloudletError

S, E = InstanceState, InstanceEvent

ALLOWED = [
    (S.CREATING, E.CREATED, S.RUNNING),
    (S.CREATING, E.CREATE_FAILED, S.FAILED),
    (S.RUNNING, E.STOP, S.STOPPING),
    (S.STOPPING, E.STOPPED, S.STOPPED),
    (S.STOPPED, E.START, S.STARTING),
    (S.STARTING, E.STARTED, S.RUNNING),
    (S.RUNNING, E.RESTART, S.RESTARTING),
    (S.UNUSABLE, E.RESTART, S.RESTARTING),
    (S.RESTARTING, E.RESTARTED, S.RUNNING),
    (S.RUNNING, E.DISK_FULL, S.UNUSABLE),
    (S.RUNNING, E.AGENT_LOST, S.UNUSABLE),
    (S.UNUSABLE, E.STOP, S.STOPPING),
    (S.STARTING, E.START_FAILED, S.FAILED),
    (S.RESTARTING, E.START_FAILED, S.FAILED),
    (S.FAILED, E.START, S.STARTING),
    (S.FAILED, E.RESTART, S.RESTARTING),
    *[(state, E.DELETE, S.DELETING) for state in S if state is not S.DELETING],
]
ALLOWED_PAIRS = {(state, event) for state, event, _ in ALLOWED}
REFUSED = [(state, event) for state in S for event in E if (state, event) not in ALLOWED_PAIRS]


def test_table_is_exactly_the_documented_transitions() -> None:
    assert {(state, event): after for state, event, after in ALLOWED} == INSTANCE_TRANSITIONS


@pytest.mark.parametrize(("state", "event", "after"), ALLOWED)
def test_allowed_transition(state: InstanceState, event: InstanceEvent, after: InstanceState) -> None:
    assert next_instance_state(state, event, "ci1") is after


@pytest.mark.parametrize(("state", "event"), REFUSED)
def test_refused_transition(state: InstanceState, event: InstanceEvent) -> None:
    with pytest.raises(CloudletError) as info:
        next_instance_state(state, event, "ci1")
    error = info.value
    assert error.status == 409
    assert error.code == "ComputeStateConflict"
    assert error.target == "ci1"
    assert f"compute instance 'ci1' is {state.value}; cannot {event.value} it now" in error.message


@pytest.mark.parametrize(
    ("state", "event", "hint"),
    [
        (S.RUNNING, E.START, "start it only when it is Stopped"),
        (S.STOPPED, E.STOP, "stop it only when it is Running"),
        (S.STOPPED, E.RESTART, "restart it only when it is Running or Unusable"),
        (S.CREATING, E.STOPPED, "wait for the current operation to finish"),
        (S.DELETING, E.DELETE, "wait for the current operation to finish"),
    ],
)
def test_refusal_hint(state: InstanceState, event: InstanceEvent, hint: str) -> None:
    with pytest.raises(CloudletError, match=hint):
        next_instance_state(state, event, "ci1")


@pytest.mark.parametrize("state", [s for s in S if s is not S.DELETING])
def test_delete_from_every_state_but_deleting(state: InstanceState) -> None:
    assert next_instance_state(state, E.DELETE) is S.DELETING


def test_delete_while_deleting_is_refused() -> None:
    with pytest.raises(CloudletError) as info:
        next_instance_state(S.DELETING, E.DELETE, "ci1")
    assert info.value.status == 409
    assert "is Deleting; cannot delete it now" in info.value.message


def test_start_stop_cycle() -> None:
    state = S.CREATING
    for event in [E.CREATED, E.STOP, E.STOPPED, E.START, E.STARTED, E.RESTART, E.RESTARTED, E.DELETE]:
        state = next_instance_state(state, event)
    assert state is S.DELETING


def test_unusable_recovery_paths() -> None:
    assert next_instance_state(next_instance_state(S.RUNNING, E.DISK_FULL), E.STOP) is S.STOPPING
    assert next_instance_state(S.UNUSABLE, E.RESTART) is S.RESTARTING


@pytest.mark.parametrize(
    ("current", "event", "after"),
    [
        ("Running", E.STOP, "Stopping"),
        ("Stopped", E.START, "Starting"),
        ("Creating", E.CREATED, "Running"),
        (None, E.DELETE, "Deleting"),
        ("", E.DELETE, "Deleting"),
    ],
)
def test_advance_instance_over_strings(current: str | None, event: InstanceEvent, after: str) -> None:
    result = advance_instance(current, event, "ci1")
    assert result == after
    assert type(result) is str


def test_advance_instance_missing_state_counts_as_failed() -> None:
    with pytest.raises(CloudletError, match="compute instance 'ci1' is Failed; cannot stop it now"):
        advance_instance(None, E.STOP, "ci1")


def test_advance_instance_refusal_is_409() -> None:
    with pytest.raises(CloudletError) as info:
        advance_instance("Running", E.START, "ci1")
    assert info.value.status == 409


@pytest.mark.parametrize(
    ("current", "target", "expected"),
    [
        (0, 0, AllocationState.STEADY),
        (3, 3, AllocationState.STEADY),
        (0, 2, AllocationState.RESIZING),
        (4, 1, AllocationState.RESIZING),
    ],
)
def test_allocation_state(current: int, target: int, expected: AllocationState) -> None:
    assert allocation_state(current, target) is expected


@pytest.mark.parametrize(
    ("min_instances", "max_instances", "needed", "target"),
    [
        (0, 4, 0, 0),
        (0, 4, 2, 2),
        (0, 4, 4, 4),
        (0, 4, 10, 4),
        (1, 4, 0, 1),
        (2, 4, 1, 2),
        (2, 4, 3, 3),
        (3, 3, 0, 3),
        (3, 3, 9, 3),
    ],
)
def test_cluster_target_nodes_clamps(
    min_instances: int, max_instances: int, needed: int, target: int
) -> None:
    assert cluster_target_nodes(min_instances, max_instances, needed) == target
