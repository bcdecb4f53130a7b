"""Long-running operations on any resource: created by services, driven by the reconciler (with
the steps the target type's step set gives, ``control/steps.py``), polled by clients. Their JSON
view is ``services/views/operations.py``."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import BindParameter, ColumnElement, and_, select
from sqlalchemy.orm import Session

from cloudlet.domain.access.roles import Access
from cloudlet.domain.compute.operation_plans import first_step
from cloudlet.domain.errors import conflict, not_found
from cloudlet.domain.resources import COMPUTES
from cloudlet.services.core import effects
from cloudlet.services.core.clock import utcnow
from cloudlet.services.core.context import Caller
from cloudlet.store.schema import Compute, Operation

IN_PROGRESS = "InProgress"
SUCCEEDED = "Succeeded"
FAILED = "Failed"


@dataclass(frozen=True)
class Target:
    """What an operation acts on: a resource of a type, by row id and name, in a workspace."""

    resource_type: str
    resource_id: int
    resource_name: str
    workspace_id: int

    @classmethod
    def of_compute(cls, compute: Compute) -> Target:
        return cls(COMPUTES, compute.id, compute.name, compute.workspace_id)


def on_resource(resource_type: str, resource_id: int | BindParameter[Any]) -> ColumnElement[bool]:
    """Operations on one resource (RESOURCE_ID an id, or a ``bindparam`` in a statement built
    once), in the order of their index."""
    return and_(Operation.resource_type == resource_type, Operation.resource_id == resource_id)


def in_progress(session: Session, target: Target) -> Operation | None:
    """The operation running on TARGET, if any (at most one runs on a resource at a time)."""
    return session.scalar(
        select(Operation).where(
            on_resource(target.resource_type, target.resource_id), Operation.status == IN_PROGRESS
        )
    )


def ensure_idle(session: Session, compute: Compute) -> None:
    running = in_progress(session, Target.of_compute(compute))
    if running is not None:
        raise conflict(
            "ComputeOperationInProgress",
            f"compute '{compute.name}' is busy with a {running.kind} operation ({running.id}); "
            "wait for it to finish (cloudlet compute show) and try again.",
            target=compute.name,
        )


def visible(session: Session, caller: Caller, op_id: str) -> Operation:
    """Operation OP_ID, for a caller who may read its workspace (404 otherwise)."""
    op = session.get(Operation, op_id[:36])
    if op is None or not caller.can(op.workspace_id, Access.READ):
        raise not_found("Operation", op_id)
    return op


def recent(session: Session, workspace_id: int, limit: int = 200) -> list[Operation]:
    """The workspace's newest operations."""
    query = (
        select(Operation)
        .where(Operation.workspace_id == workspace_id)
        .order_by(Operation.created_on.desc())
        .limit(limit)
    )
    return list(session.scalars(query))


def start(session: Session, target: Compute | Target, kind: str, created_by: str) -> Operation:
    """Record a KIND operation on TARGET at its plan's first step; the reconciler takes it up."""
    resource = target if isinstance(target, Target) else Target.of_compute(target)
    op = Operation(
        id=str(uuid.uuid4()),
        workspace_id=resource.workspace_id,
        resource_type=resource.resource_type,
        resource_id=resource.resource_id,
        resource_name=resource.resource_name,
        kind=kind,
        status=IN_PROGRESS,
        step=first_step(resource.resource_type, kind),
        created_by=created_by,
        created_on=utcnow(),
        lease_expires_at=0.0,
        fencing_token=0,
    )
    session.add(op)
    session.flush()
    effects.operations_pending(session)
    effects.demand_changed(session)  # a cluster made, resized or deleted changes what is needed
    return op
