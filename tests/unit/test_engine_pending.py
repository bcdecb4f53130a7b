"""A node its engine keeps pending (a queued Slurm allocation) is not failed by the start timeout."""

from __future__ import annotations

from typing import Any

from cloudlet.control.node_records import NodeRecorder
from cloudlet.domain.compute.nodes import START_TIMEOUT_S, NodeState
from cloudlet.services.compute.nodes import status_message
from cloudlet.store.schema import Node

NOW = 10_000.0


def starting(report: dict[str, Any]) -> Node:
    since = NOW - START_TIMEOUT_S - 30  # past the start timeout
    return Node(
        id="n1",
        location="hpc",
        provider_ref={"job_id": "7"},
        state=NodeState.STARTING.value,
        state_since=since,
        created_at=since,
        report=report,
    )


def test_a_pending_node_waits_past_the_start_timeout_and_says_why() -> None:
    pending = {"provider_status": {"phase": "pending", "reason": "Resources", "message": "Slurm: Resources"}}
    node = starting(pending)
    NodeRecorder(started=0.0).record(None, [node], NOW)  # type: ignore[arg-type]
    assert node.state == NodeState.STARTING.value
    assert status_message(node) == "Slurm: Resources"


def test_a_running_node_that_never_registers_still_fails_its_setup() -> None:
    node = starting({"provider_status": {"phase": "running", "reason": "", "message": ""}})
    NodeRecorder(started=0.0).record(None, [node], NOW)  # type: ignore[arg-type]
    assert node.state == NodeState.SETUP_FAILED.value and node.error["code"] == "NodeSetupFailed"
    assert status_message(node) is None
