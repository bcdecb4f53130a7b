"""The native view of a long-running operation: the document ``cloudlet`` clients poll (the CLI's
wait loop and ``client._rest`` read ``status``, ``error`` and ``target_name``)."""

from __future__ import annotations

from typing import Any

from cloudlet.services.core.clock import iso
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.store.schema import Operation


def render(op: Operation, ref: WorkspaceRef) -> dict[str, Any]:
    return {
        "id": op.id,
        "kind": op.kind,
        "status": op.status,
        "step": op.step,
        # The target's ARM id: its type is the path segment (``…/computes/{name}``).
        "target": f"{ref.arm_id}/{op.resource_type}/{op.resource_name}",
        "target_name": op.resource_name,
        "error": op.error,
        "created_by": op.created_by,
        "created_on": iso(op.created_on),
        "ended_on": iso(op.ended_on),
    }
