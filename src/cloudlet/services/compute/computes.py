"""Compute resources: create-or-update, patch, delete, start/stop/restart, read.

Every write validates everything first (spec, size, location, locks, quota, state) and only then
touches the store; the use case commits its own unit of work (a refused request leaves nothing
behind). The work that follows (provisioning, power changes) is an operation the reconciler
drives: starting one records the effect that wakes it (``services.core.effects``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from cloudlet.domain.access.roles import Access, Role
from cloudlet.domain.compute import attached_vms as vm_rules
from cloudlet.domain.compute import compute_types
from cloudlet.domain.compute import locks as lock_rules
from cloudlet.domain.compute.compute_spec import (
    ComputeInstanceSpec,
    ComputeSpec,
    VirtualMachineSpec,
    parse_compute,
    spec_to_doc,
)
from cloudlet.domain.compute.compute_types import ComputeType
from cloudlet.domain.compute.lifecycle import (
    InstanceEvent,
    InstanceState,
    ProvisioningState,
    advance_instance,
)
from cloudlet.domain.compute.quota import CoreRequest, Tier
from cloudlet.domain.compute.sizes import Catalogue
from cloudlet.domain.compute.ssh_policy import SshPolicy, check_ssh_allowed, public_key_problem
from cloudlet.domain.errors import CloudletError, forbidden, not_found
from cloudlet.services.access import audit, workspaces
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import host_keys, instances, operations, quotas
from cloudlet.services.compute import locks as lock_store
from cloudlet.services.core.clock import utcnow
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.services.views import computes as compute_view
from cloudlet.store.schema import Compute, Location, Operation, Principal, Workspace

IMMUTABLE_FIELDS = ("type", "size", "location", "tier", "address")
PATCHABLE_FIELDS = {
    "min_instances",
    "max_instances",
    "idle_time_before_scale_down",
    "description",
    "tags",
    "idle_time_before_shutdown_minutes",
    "schedules",
    "ssh_public_access_enabled",
    "identity",  # az ml compute update --identity-type (the samples' data-access set-up)
}
ACTIONS: dict[str, tuple[InstanceEvent, str]] = {
    "start": (InstanceEvent.START, "start"),
    "stop": (InstanceEvent.STOP, "stop"),
    "restart": (InstanceEvent.RESTART, "restart"),
}


@dataclass(frozen=True)
class WriteResult:
    compute: Compute
    operation: Operation
    created: bool
    view: dict[str, Any]  # as it stands once committed (``services.views.computes``)


_BY_NAME = select(Compute).where(Compute.workspace_id == bindparam("ws"), Compute.name == bindparam("name"))


def find(session: Session, ws: Workspace, name: str) -> Compute | None:
    return session.scalar(_BY_NAME, {"ws": ws.id, "name": name})


def readable(session: Session, ref: WorkspaceRef, caller: Caller, name: str) -> tuple[Workspace, Compute]:
    """The workspace and its compute NAME, for a caller who may read it (404 otherwise): one query."""
    ws, compute = workspaces.resolve_child(session, ref, caller, Access.READ, Compute, name)
    if compute is None:
        raise not_found("Compute", name)
    return ws, compute


def get(session: Session, ws: Workspace, name: str) -> Compute:
    compute = session.scalar(_BY_NAME, {"ws": ws.id, "name": name})
    if compute is None:
        raise not_found("Compute", name)
    return compute


def list_all(session: Session, ws: Workspace) -> list[Compute]:
    return list(session.scalars(select(Compute).where(Compute.workspace_id == ws.id).order_by(Compute.name)))


def create_or_update(
    session: Session, ref: WorkspaceRef, ws: Workspace, name: str, body: Any, caller: Caller, endpoint: str
) -> WriteResult:
    """ENDPOINT: the server's public URL (an instance's services in the view)."""
    compute, op, created = _create_or_update(session, ref, ws, name, body, caller)
    result = WriteResult(compute, op, created, compute_view.view(session, ref, compute, endpoint))
    session.commit()
    return result


def _create_or_update(
    session: Session, ref: WorkspaceRef, ws: Workspace, name: str, body: Any, caller: Caller
) -> tuple[Compute, Operation, bool]:
    spec = parse_compute(body, name)
    catalogue = catalogue_service.current(session)
    location = _location(session, spec, ws)
    size_name = _check_size(spec, catalogue)
    existing = session.scalar(select(Compute).where(Compute.workspace_id == ws.id, Compute.name == name))
    _check_ssh(spec, ws)
    if isinstance(spec, VirtualMachineSpec) and spec.address:
        vm_rules.host_config(spec.model_dump(mode="json"))  # a 400 naming the field before any SSH
    doc = spec_to_doc(spec)
    doc["location"] = location
    if size_name:
        doc["size"] = size_name
    if vm_rules.is_attached(doc) and existing is not None and existing.spec.get("facts"):
        doc["facts"] = existing.spec["facts"]  # attached already: an update changes the record
    if existing is None:
        return _create(session, ref, ws, spec, doc, location, caller, catalogue)
    return _update(session, ref, existing, doc, caller, catalogue)


def patch(
    session: Session, ref: WorkspaceRef, ws: Workspace, name: str, body: Any, caller: Caller, endpoint: str
) -> WriteResult:
    compute = get(session, ws, name)
    if not isinstance(body, dict):
        raise CloudletError("ValidationError", "the update must be a JSON object", "$")
    for field in body:
        if field not in PATCHABLE_FIELDS:
            hint = "it cannot change after creation" if field in IMMUTABLE_FIELDS else "it is not updatable"
            raise CloudletError(
                "ValidationError",
                f"'{field}' cannot be updated ({hint}); updatable: {', '.join(sorted(PATCHABLE_FIELDS))}",
                field,
            )
    merged = {k: v for k, v in {**compute.spec, **body}.items() if k != "facts"}
    return create_or_update(session, ref, ws, name, merged, caller, endpoint)


ATTACHED = compute_types.ATTACHED


def delete(
    session: Session, ref: WorkspaceRef, ws: Workspace, name: str, caller: Caller, detach: bool = False
) -> Operation:
    """Delete (cloudlet's own computes) or, with DETACH, detach an attached one (the machine
    stays): Azure's ``underlyingResourceAction``."""
    compute = get(session, ws, name)
    if detach and compute.type not in ATTACHED:
        raise CloudletError(
            "ValidationError",
            f"'{name}' is a {compute.type} compute, which cloudlet made: delete it "
            "(underlyingResourceAction=Delete); Detach is for attached computes",
            "underlyingResourceAction",
        )
    _require_owner_for_instance(compute, caller, "delete")
    lock_rules.check_write(
        lock_store.effective(session, ref, name), ref.compute_id(name), lock_rules.WriteKind.DELETE
    )
    operations.ensure_idle(session, compute)
    if compute.type == ComputeType.COMPUTE_INSTANCE:
        compute.state = advance_instance(compute.state, InstanceEvent.DELETE, name)
    compute.provisioning_state = ProvisioningState.DELETING.value
    compute.last_modified_on = utcnow()
    op = operations.start(session, compute, "delete", caller.name)
    details = {"type": compute.type, "operation_id": op.id}
    audit.record(session, caller.name, "compute.delete", ref.compute_id(name), details)
    session.commit()
    return op


def act(
    session: Session, ref: WorkspaceRef, ws: Workspace, name: str, action: str, caller: Caller
) -> Operation:
    compute = get(session, ws, name)
    if compute.type != ComputeType.COMPUTE_INSTANCE:
        raise CloudletError(
            "OperationNotSupported",
            f"'{action}' applies to compute instances; '{name}' is {compute.type} "
            "(clusters scale between min_instances and max_instances instead)",
            name,
        )
    _require_owner_for_instance(compute, caller, action)
    lock_rules.check_write(
        lock_store.effective(session, ref, name), ref.compute_id(name), lock_rules.WriteKind.ACTION
    )
    operations.ensure_idle(session, compute)
    event, kind = ACTIONS[action]
    before = compute.state
    compute.state = advance_instance(compute.state, event, name)
    compute.last_modified_on = utcnow()
    op = operations.start(session, compute, kind, caller.name)
    details = {"old_state": before, "new_state": compute.state, "operation_id": op.id}
    audit.record(session, caller.name, f"compute.{action}", ref.compute_id(name), details)
    session.commit()
    return op


def _create(
    session: Session,
    ref: WorkspaceRef,
    ws: Workspace,
    spec: ComputeSpec,
    doc: dict[str, Any],
    location: str,
    caller: Caller,
    catalogue: Catalogue,
) -> tuple[Compute, Operation, bool]:
    lock_rules.check_write(
        lock_store.effective(session, ref, spec.name), ref.compute_id(spec.name), lock_rules.WriteKind.CREATE
    )
    owner = _owner(session, spec, caller, ws)
    if spec.type == ComputeType.COMPUTE_INSTANCE:
        instances.ensure_name_free(session, spec.name, ws.id)
    compute = Compute(
        workspace_id=ws.id,
        name=spec.name,
        type=spec.type,
        location=location,
        size=doc.get("size"),
        spec=doc,
        owner=owner,
        created_by=caller.name,
        provisioning_state=ProvisioningState.CREATING.value,
        state=InstanceState.CREATING.value if spec.type == ComputeType.COMPUTE_INSTANCE else None,
        current_node_count=0,
        errors=[],
        warnings=_warnings(spec, location, ws),
        created_on=utcnow(),
        last_modified_on=utcnow(),
    )
    _check_quota(session, ref, compute, catalogue)
    if vm_rules.is_attached(doc) and "facts" not in doc:
        # Last, once everything else is known to be fine: log in, probe, install the agent.
        from cloudlet.services.compute import attached_vms  # asyncssh only when a VM is attached

        doc["facts"] = attached_vms.attach_check(doc)
        compute.spec = doc
    session.add(compute)
    session.flush()
    seen = (doc.get("facts") or {}).get("host_key") if vm_rules.is_attached(doc) else None
    if seen:  # the key attach logged in with: the VM's provider checks it from now on
        host = vm_rules.host_config(doc)
        scope = vm_rules.provider_key(compute.id)
        host_keys.remember(session, scope, host["address"], host["port"], seen, time.time())
    op = operations.start(session, compute, "create", caller.name)
    details = {"type": compute.type, "size": compute.size, "location": location, "operation_id": op.id}
    if owner is not None:
        details["owner"] = owner
    audit.record(session, caller.name, "compute.create", ref.compute_id(compute.name), details)
    return compute, op, True


def _update(
    session: Session,
    ref: WorkspaceRef,
    compute: Compute,
    doc: dict[str, Any],
    caller: Caller,
    catalogue: Catalogue,
) -> tuple[Compute, Operation, bool]:
    for field in IMMUTABLE_FIELDS:
        before, after = compute.spec.get(field), doc.get(field)
        if field == "size" and before and after and before.lower() == after.lower():
            continue
        if before != after:
            raise CloudletError(
                "ImmutableFieldChange",
                f"'{field}' of existing compute '{compute.name}' is {before!r} and cannot change to "
                f"{after!r}; "
                "delete the compute and create it again, or use a new name.",
                field,
                409,
            )
    if compute.provisioning_state == ProvisioningState.DELETING.value:
        raise CloudletError(
            "ComputeBeingDeleted",
            f"compute '{compute.name}' is being deleted; wait for it to go, then create it again",
            compute.name,
            409,
        )
    lock_rules.check_write(
        lock_store.effective(session, ref, compute.name),
        ref.compute_id(compute.name),
        lock_rules.WriteKind.UPDATE,
    )
    operations.ensure_idle(session, compute)
    if compute.type == ComputeType.COMPUTE_INSTANCE:
        _require_owner_for_instance(compute, caller, "update")
        doc.pop("create_on_behalf_of", None)
        if compute.spec.get("create_on_behalf_of"):
            doc["create_on_behalf_of"] = compute.spec["create_on_behalf_of"]
    previous = compute.spec
    compute.spec = doc
    try:
        _check_quota(session, ref, compute, catalogue)
    except CloudletError:
        compute.spec = previous
        raise
    compute.provisioning_state = ProvisioningState.UPDATING.value
    compute.last_modified_on = utcnow()
    op = operations.start(session, compute, "update", caller.name)
    details = {"changed": audit.changes(previous, doc), "operation_id": op.id}
    audit.record(session, caller.name, "compute.update", ref.compute_id(compute.name), details)
    return compute, op, False


def _location(session: Session, spec: ComputeSpec, ws: Workspace) -> str:
    location = spec.location or ws.location
    if session.get(Location, location) is None:
        known = ", ".join(sorted(session.scalars(select(Location.name))))
        raise CloudletError(
            "UnknownLocation", f"location '{location}' does not exist; use one of: {known}", "location"
        )
    if spec.type == ComputeType.COMPUTE_INSTANCE and location != ws.location:
        raise CloudletError(
            "InstanceLocationMismatch",
            f"a compute instance must be in its workspace's location '{ws.location}' (got '{location}'); "
            "only compute clusters may be placed elsewhere",
            "location",
        )
    return location


def _check_size(spec: ComputeSpec, catalogue: Catalogue) -> str | None:
    size_name = getattr(spec, "size", None)
    if size_name is None:
        return None
    size = catalogue.require_size(size_name, spec.type)
    if getattr(spec, "tier", Tier.DEDICATED) == Tier.LOW_PRIORITY and not size.low_priority_capable:
        raise CloudletError(
            "LowPriorityNotSupported",
            f"{size.name} cannot run at low priority; choose tier: dedicated or another size",
            "tier",
        )
    return size.name


def _warnings(spec: ComputeSpec, location: str, ws: Workspace) -> list[dict[str, str]]:
    if spec.type == ComputeType.AMLCOMPUTE and location != ws.location:
        return [
            {
                "code": "CrossLocationCompute",
                "message": (
                    f"cluster location '{location}' differs from workspace location '{ws.location}': expect "
                    "added latency and data-transfer cost between them (C4)"
                ),
            }
        ]
    return []


def _check_quota(session: Session, ref: WorkspaceRef, compute: Compute, catalogue: Catalogue) -> None:
    size = catalogue.get(compute.size or "")
    if size is None:
        return
    if compute.type == ComputeType.COMPUTE_INSTANCE:
        request = CoreRequest(compute.name, size.family, Tier.DEDICATED, size.vcpus, 1, "instance")
    else:
        nodes = quotas.cluster_nodes_held(compute)
        if nodes == 0:
            return
        request = CoreRequest(
            compute.name,
            size.family,
            Tier(compute.spec.get("tier", Tier.DEDICATED)),
            size.vcpus,
            nodes,
            "min_instances",
        )
    quotas.check(session, ref.subscription_id, compute.location, catalogue, request)


def _owner(session: Session, spec: ComputeSpec, caller: Caller, ws: Workspace) -> str | None:
    if spec.type != ComputeType.COMPUTE_INSTANCE:
        return None
    on_behalf = getattr(spec, "create_on_behalf_of", None)
    if on_behalf is None:
        return caller.name
    if not (caller.is_admin or caller.roles.get(ws.id) == Role.OWNER):
        raise forbidden(
            "creating an instance on behalf of another user needs the Owner role (I8)", "create_on_behalf_of"
        )
    user = on_behalf.user_object_id
    if session.scalar(select(Principal).where(Principal.name == user)) is None:
        raise CloudletError(
            "UnknownUser",
            f"create_on_behalf_of.user_object_id '{user}' is not a cloudlet "
            "user; create it with `cloudlet user create`",
            "create_on_behalf_of.user_object_id",
        )
    return user


def _check_ssh(spec: ComputeSpec, ws: Workspace) -> None:
    """I3: SSH on an instance needs a valid public key and a policy that allows it."""
    if not isinstance(spec, ComputeInstanceSpec) or not spec.ssh_public_access_enabled:
        return
    check_ssh_allowed(True, SshPolicy(workspace_allows=ws.allow_ssh_public_access))
    problem = public_key_problem(spec.ssh_settings.ssh_key_value if spec.ssh_settings else None)
    if problem:
        raise CloudletError("ValidationError", problem, "ssh_settings.ssh_key_value")


def _require_owner_for_instance(compute: Compute, caller: Caller, verb: str) -> None:
    """I1: an instance has exactly one owner; only they (or a workspace Owner) may drive it."""
    if compute.type != ComputeType.COMPUTE_INSTANCE or compute.owner == caller.name:
        return
    if caller.can(compute.workspace_id, Access.MANAGE):
        return
    raise forbidden(
        f"only the owner '{compute.owner}' of instance '{compute.name}' may {verb} it", compute.name
    )
