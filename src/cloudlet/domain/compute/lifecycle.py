"""Explicit state machines for compute resources (pure).

Provisioning state is the resource's (Azure ``provisioningState``); instance state is the
workstation's power state; a cluster's allocation state is derived from current vs target nodes.
Invalid transitions are refused with a 409 that says what the compute is doing now.
"""

from __future__ import annotations

from enum import StrEnum

from cloudlet.domain.errors import conflict


class ProvisioningState(StrEnum):
    CREATING = "Creating"
    UPDATING = "Updating"
    DELETING = "Deleting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELED = "Canceled"


class InstanceState(StrEnum):
    CREATING = "Creating"
    RUNNING = "Running"
    STOPPING = "Stopping"
    STOPPED = "Stopped"
    STARTING = "Starting"
    RESTARTING = "Restarting"
    DELETING = "Deleting"
    UNUSABLE = "Unusable"
    FAILED = "Failed"


class AllocationState(StrEnum):
    STEADY = "Steady"
    RESIZING = "Resizing"


class InstanceEvent(StrEnum):
    CREATED = "created"
    CREATE_FAILED = "create_failed"
    STOP = "stop"
    STOPPED = "stopped"
    START = "start"
    STARTED = "started"
    RESTART = "restart"
    RESTARTED = "restarted"
    DELETE = "delete"
    DISK_FULL = "disk_full"
    AGENT_LOST = "agent_lost"  # the instance's agent stopped reporting (its machine died)
    START_FAILED = "start_failed"  # the node or its apps did not come up (start or restart)


_S, _E = InstanceState, InstanceEvent
INSTANCE_TRANSITIONS: dict[tuple[InstanceState, InstanceEvent], InstanceState] = {
    (_S.CREATING, _E.CREATED): _S.RUNNING,
    (_S.CREATING, _E.CREATE_FAILED): _S.FAILED,
    (_S.RUNNING, _E.STOP): _S.STOPPING,
    (_S.STOPPING, _E.STOPPED): _S.STOPPED,
    (_S.STOPPED, _E.START): _S.STARTING,
    (_S.STARTING, _E.STARTED): _S.RUNNING,
    (_S.RUNNING, _E.RESTART): _S.RESTARTING,
    (_S.UNUSABLE, _E.RESTART): _S.RESTARTING,
    (_S.RESTARTING, _E.RESTARTED): _S.RUNNING,
    (_S.RUNNING, _E.DISK_FULL): _S.UNUSABLE,
    (_S.RUNNING, _E.AGENT_LOST): _S.UNUSABLE,
    # An unusable instance can still be stopped (I13: free space, then reboot).
    (_S.UNUSABLE, _E.STOP): _S.STOPPING,
    # A start or restart whose node or apps did not come up leaves the instance Failed (its node is
    # released); starting or restarting it again retries.
    (_S.STARTING, _E.START_FAILED): _S.FAILED,
    (_S.RESTARTING, _E.START_FAILED): _S.FAILED,
    (_S.FAILED, _E.START): _S.STARTING,
    (_S.FAILED, _E.RESTART): _S.RESTARTING,
}
# Delete is allowed from every settled or failed state; only a delete already under way refuses it.
for _state in InstanceState:
    if _state is not InstanceState.DELETING:
        INSTANCE_TRANSITIONS[(_state, InstanceEvent.DELETE)] = InstanceState.DELETING

_USER_HINTS = {
    InstanceEvent.START: "start it only when it is Stopped or Failed",
    InstanceEvent.STOP: "stop it only when it is Running",
    InstanceEvent.RESTART: "restart it only when it is Running or Unusable",
}


def next_instance_state(state: InstanceState, event: InstanceEvent, name: str = "") -> InstanceState:
    try:
        return INSTANCE_TRANSITIONS[(state, event)]
    except KeyError:
        hint = _USER_HINTS.get(event, "wait for the current operation to finish")
        raise conflict(
            "ComputeStateConflict",
            f"compute instance '{name}' is {state.value}; cannot {event.value} it now ({hint}).",
            target=name,
        ) from None


def allocation_state(current_nodes: int, target_nodes: int) -> AllocationState:
    return AllocationState.STEADY if current_nodes == target_nodes else AllocationState.RESIZING


def cluster_target_nodes(min_instances: int, max_instances: int, nodes_needed: int) -> int:
    """C7/C9: the cluster holds between min and max nodes, following the demand of its jobs."""
    return max(min_instances, min(nodes_needed, max_instances))


def advance_instance(current: str | None, event: InstanceEvent, name: str = "") -> str:
    """``next_instance_state`` over the stored string form (a missing state counts as Failed)."""
    return next_instance_state(InstanceState(current or InstanceState.FAILED), event, name).value
