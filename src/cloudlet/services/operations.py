"""Long-running operations: created by services, driven by the reconciler, polled by clients."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.domain.errors import conflict
from cloudlet.services.clock import iso, utcnow
from cloudlet.services.context import WorkspaceRef
from cloudlet.store.schema import Compute, Operation

IN_PROGRESS = "InProgress"
SUCCEEDED = "Succeeded"
FAILED = "Failed"

# Each kind is a fixed sequence of steps; the reconciler journals each one exactly once.
PLANS: dict[str, tuple[str, ...]] = {
    "create": ("provision", "finalize"),
    "update": ("apply",),
    "delete": ("release", "remove"),
    "start": ("power_on",),
    "stop": ("power_off",),
    "restart": ("reboot",),
}


def ensure_idle(session: Session, compute: Compute) -> None:
    running = session.scalar(
        select(Operation).where(Operation.compute_id == compute.id, Operation.status == IN_PROGRESS)
    )
    if running is not None:
        raise conflict(
            "ComputeOperationInProgress",
            f"compute '{compute.name}' is busy with a {running.kind} operation ({running.id}); "
            "wait for it to finish (cloudlet compute show) and try again.",
            target=compute.name,
        )


def start(session: Session, compute: Compute, kind: str, created_by: str) -> Operation:
    op = Operation(
        id=str(uuid.uuid4()),
        workspace_id=compute.workspace_id,
        compute_id=compute.id,
        compute_name=compute.name,
        kind=kind,
        status=IN_PROGRESS,
        step=PLANS[kind][0],
        created_by=created_by,
        created_on=utcnow(),
        lease_expires_at=0.0,
        fencing_token=0,
    )
    session.add(op)
    session.flush()
    return op


def render(op: Operation, ref: WorkspaceRef) -> dict[str, Any]:
    return {
        "id": op.id,
        "kind": op.kind,
        "status": op.status,
        "step": op.step,
        "target": ref.compute_id(op.compute_name),
        "target_name": op.compute_name,
        "error": op.error,
        "created_by": op.created_by,
        "created_on": iso(op.created_on),
        "ended_on": iso(op.ended_on),
    }
