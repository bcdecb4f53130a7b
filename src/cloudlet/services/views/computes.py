"""The compute as clients see it: YAML field names plus status fields, all derived on read."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy.orm import Session

from cloudlet.domain.compute import attached_vms as vm_rules
from cloudlet.domain.compute import costs
from cloudlet.domain.compute.compute_spec import cluster_scaling
from cloudlet.domain.compute.compute_types import ComputeType
from cloudlet.domain.compute.instance_watch import explain
from cloudlet.domain.compute.lifecycle import allocation_state, cluster_target_nodes
from cloudlet.domain.compute.locks import Lock, scaling_block
from cloudlet.domain.compute.quota import Tier
from cloudlet.domain.compute.sizes import Catalogue
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import instance_activity, instance_reports, instances
from cloudlet.services.compute import locks as lock_store
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.core.clock import iso
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.jobs import fair_queue
from cloudlet.store.schema import Compute


def render(
    compute: Compute,
    ref: WorkspaceRef,
    locks: list[Lock],
    catalogue: Catalogue | None = None,
    endpoint: str = "",
    instance_status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``endpoint`` (the server's public URL) makes an instance's ``services`` absolute URLs;
    ``instance_status`` (``domain.compute.instance_watch.explain``) says why it is (not) idle, when it
    stops, its next scheduled action and why it is Unusable."""
    body: dict[str, Any] = {
        **compute.spec,
        "name": compute.name,
        "type": compute.type,
        "id": ref.compute_id(compute.name),
        "location": compute.location,
        "description": compute.spec.get("description"),
        "tags": compute.spec.get("tags", {}),
        "provisioning_state": compute.provisioning_state,
        "provisioning_errors": compute.errors or [],
        "warnings": [*(compute.warnings or []), *_retirement(compute, catalogue)],
        "created_by": compute.created_by,
        "created_on": iso(compute.created_on),
        "last_modified_on": iso(compute.last_modified_on),
    }
    size = catalogue.get(compute.size) if catalogue and compute.size else None
    if compute.type == ComputeType.AMLCOMPUTE:
        body.update(_cluster_status(compute, ref, locks))
        if size is not None:
            low = compute.spec.get("tier") == Tier.LOW_PRIORITY
            body["cost"] = costs.cluster_cost(size, compute.current_node_count, low).to_doc()
    elif compute.type == ComputeType.COMPUTE_INSTANCE:
        body["state"] = compute.state
        body["owner"] = compute.owner
        body["services"] = instances.services(compute, endpoint)
        body.update(instance_status or {})
        if size is not None:
            body["cost"] = costs.instance_cost(size, compute.state, instances.os_disk_gb()).to_doc()
    return body


def _retirement(compute: Compute, catalogue: Catalogue | None) -> list[dict[str, str]]:
    """T11: compute made on a series that has since retired is flagged, with what to move to."""
    size = catalogue.get(compute.size) if catalogue and compute.size else None
    if size is None:
        return []
    series = catalogue.series_of(size)  # type: ignore[union-attr]
    if series.retired_on is None:
        return []
    return [
        {
            "code": "RetiredVmSeries",
            "message": f"series {series.name} ({size.name}) was retired on {series.retired_on}; recreate "
            f"this compute on a current series such as {' or '.join(series.replacements)}",
        }
    ]


def _cluster_status(compute: Compute, ref: WorkspaceRef, locks: list[Lock]) -> dict[str, Any]:
    spec = cluster_scaling(compute.spec)
    current = compute.current_node_count
    target = compute.target_node_count
    if target is None:  # the autoscaler has not looked at it yet
        target = cluster_target_nodes(spec.min_instances, spec.max_instances, 0)
    block = scaling_block(locks, ref.arm_id)
    status = allocation_state(current, target)
    if block is not None:
        # C6: the cluster cannot change its node count; it shows as stuck resizing.
        message = f"{block.reason}; the cluster stays at {current} nodes (target {target}). Fix: {block.fix}"
    elif compute.scale_message:
        message = compute.scale_message
    elif status.value == "Resizing":
        message = f"resizing from {current} to {target} nodes (min_instances {spec.min_instances})"
    else:
        message = f"steady at {current} nodes"
    return {
        "allocation_state": "Resizing" if block is not None else status.value,
        "current_node_count": current,
        "target_node_count": current if block is not None else target,
        "scaling_blocked": block.to_dict() if block is not None else None,
        "status_message": message,
    }


def view(session: Session, ref: WorkspaceRef, compute: Compute, endpoint: str) -> dict[str, Any]:
    """The compute's view with what it derives from other rows (locks on a cluster, an instance's
    activity and SSH settings, an attached machine's node): a few local queries, no node call."""
    locks = lock_store.effective(session, ref, compute.name) if compute.type == ComputeType.AMLCOMPUTE else []
    status = None
    if compute.type == ComputeType.COMPUTE_INSTANCE:
        status = explain(instance_activity.facts(session, compute, time.time()))
    body = render(compute, ref, locks, catalogue_service.current(session), endpoint, status)
    if compute.type == ComputeType.COMPUTE_INSTANCE:
        body.update(instance_reports.view(session, compute))  # ssh_settings: user, port, command
    if compute.type == ComputeType.AMLCOMPUTE:  # a pool with team shares: the hourly preemption cap
        figure = fair_queue.preemption_figure(session, compute)
        if figure is not None:
            body["preemptions"] = figure
    if compute.type == ComputeType.VIRTUAL_MACHINE:  # its state from its node's row, its facts from attach
        states = [n.state for n in node_service.live_nodes(session, compute.id)]
        body.update(vm_rules.view(compute.spec, compute.provisioning_state, states))
    return body
