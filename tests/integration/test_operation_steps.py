"""The operation reconciler drives a resource type it knows only through the step registry: a
test-only type over a real SQLite store, its steps claimed, journalled in plan order, retried
while pending and failed when the target is gone; operations on types the registry lacks are
left for a replica that knows them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.control.reconciler import OperationReconciler
from cloudlet.control.steps import StepRegistry
from cloudlet.domain.resources import COMPUTES
from cloudlet.server import open_store
from cloudlet.services.compute import operations
from cloudlet.services.core.clock import utcnow
from cloudlet.store.schema import Operation, OperationStep, Workspace
from tests.unit.test_step_registry import Widgets

MAX_PASSES = 5


def _add_widget_operation(sessions: sessionmaker[Session], op_id: str, widget_id: int) -> None:
    """The test type has no plans in the domain, so its operation is recorded at its first step
    here rather than by ``operations.start``."""
    with sessions.begin() as session:
        ws = session.scalars(select(Workspace)).one()
        session.add(
            Operation(
                id=op_id,
                workspace_id=ws.id,
                resource_type=Widgets.resource_type,
                resource_id=widget_id,
                resource_name=f"w{widget_id}",
                kind="create",
                status=operations.IN_PROGRESS,
                step=Widgets.plans["create"][0],
                created_by="test",
                created_on=utcnow(),
                lease_expires_at=0.0,
                fencing_token=0,
            )
        )


def _add_compute_operation(sessions: sessionmaker[Session]) -> str:
    with sessions.begin() as session:
        ws = session.scalars(select(Workspace)).one()
        return operations.start(session, operations.Target(COMPUTES, 1, "c1", ws.id), "create", "test").id


def _state(sessions: sessionmaker[Session], op_id: str) -> dict[str, Any]:
    with sessions() as session:
        op = session.get(Operation, op_id)
        assert op is not None
        journal = session.scalars(
            select(OperationStep).where(OperationStep.operation_id == op_id).order_by(OperationStep.id)
        )
        return {
            "status": op.status,
            "step": op.step,
            "error": op.error,
            "token": op.fencing_token,
            "owner": op.lease_owner,
            "journal": [(s.step, s.executor) for s in journal],
        }


def _until_ended(reconciler: OperationReconciler, sessions: sessionmaker[Session], op_id: str) -> int:
    for passes in range(1, MAX_PASSES + 1):
        reconciler.run_once()
        if _state(sessions, op_id)["status"] != operations.IN_PROGRESS:
            return passes
    raise AssertionError(f"operation {op_id} did not end in {MAX_PASSES} passes: {_state(sessions, op_id)}")


def test_a_test_only_type_is_driven_through_its_step_set(tmp_path: Path) -> None:
    sessions = open_store(tmp_path, None).control
    widgets = Widgets()
    widgets.rows[1] = {"name": "w1"}
    reconciler = OperationReconciler(sessions, "replica-a", StepRegistry(widgets))
    _add_widget_operation(sessions, "op-widget", 1)
    _add_widget_operation(sessions, "op-gone", 9)
    compute_op = _add_compute_operation(sessions)

    reconciler.run_once()  # carve is done; paint waits (pending: not journalled)
    waiting = _state(sessions, "op-widget")
    assert (waiting["status"], waiting["step"]) == (operations.IN_PROGRESS, "paint")
    assert waiting["journal"] == [("carve", "replica-a")]
    gone = _state(sessions, "op-gone")
    assert gone["status"] == operations.FAILED and gone["error"]["code"] == "WidgetGone"
    assert gone["step"] == "carve"

    widgets.rows[1]["dry"] = True
    assert _until_ended(reconciler, sessions, "op-widget") == 1
    done = _state(sessions, "op-widget")
    assert done["status"] == operations.SUCCEEDED and done["owner"] is None
    assert done["journal"] == [("carve", "replica-a"), ("paint", "replica-a")]
    assert widgets.done == [("w1", "carve"), ("w1", "paint")]

    # This replica has no compute steps: it never claimed the compute operation.
    untouched = _state(sessions, compute_op)
    assert (untouched["status"], untouched["token"], untouched["owner"]) == (operations.IN_PROGRESS, 0, None)
    assert untouched["step"] == "provision" and untouched["journal"] == []
