"""Role assignments on a workspace: give, change, remove, list. ``put`` and ``remove`` are use
cases: they check the caller's right to manage the workspace (Owner or administrator, through
``workspaces.resolve``), write and commit."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.domain.access.roles import Access, Role, parse_role
from cloudlet.domain.errors import not_found, validation_error
from cloudlet.services.access import audit, identity, workspaces
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.services.core.use_case import use_case
from cloudlet.store.schema import Principal, RoleAssignment, Workspace


def assignment_target(session: Session, workspace: Workspace, principal: str) -> str:
    return f"{workspaces.ref_of(session, workspace).arm_id}/roleAssignments/{principal}"


def _row(session: Session, workspace: Workspace, principal: Principal) -> RoleAssignment | None:
    return session.scalar(
        select(RoleAssignment).where(
            RoleAssignment.principal_id == principal.id, RoleAssignment.workspace_id == workspace.id
        )
    )


@use_case
def put(
    session: Session, ref: WorkspaceRef, caller: Caller, principal_name: str, role_name: str
) -> dict[str, Any]:
    """Give ``principal_name`` the role ``role_name`` (Owner, Contributor, Reader; any case) on the
    workspace the caller manages; committed. The assignment as rendered."""
    workspace = workspaces.resolve(session, ref, caller, Access.MANAGE)
    try:
        role = parse_role(role_name)
    except ValueError as exc:
        raise validation_error("role", str(exc)) from None
    assign(session, workspace, identity.require_principal(session, principal_name), role, caller.name)
    session.commit()
    return render(workspace, principal_name, role.value)


def assign(session: Session, workspace: Workspace, principal: Principal, role: Role, actor: str) -> None:
    row = _row(session, workspace, principal)
    old = row.role if row is not None else None
    if old == role.value:
        return  # nothing changes, nothing is recorded
    if row is None:
        session.add(RoleAssignment(principal_id=principal.id, workspace_id=workspace.id, role=role.value))
    else:
        row.role = role.value
    details = {
        "principal": principal.name,
        "workspace": workspace.name,
        "old_role": old,
        "new_role": role.value,
    }
    audit.record(
        session, actor, "roleAssignment.write", assignment_target(session, workspace, principal.name), details
    )
    identity.forget_callers_on_commit(session)


@use_case
def remove(session: Session, ref: WorkspaceRef, caller: Caller, principal_name: str) -> None:
    """Take away the principal's role on the workspace the caller manages: it no longer sees the
    workspace (404). Committed."""
    workspace = workspaces.resolve(session, ref, caller, Access.MANAGE)
    actor = caller.name
    principal = identity.find_principal(session, principal_name)
    row = _row(session, workspace, principal) if principal is not None else None
    if principal is None or row is None:
        raise not_found("RoleAssignment", principal_name)
    session.delete(row)
    details = {"principal": principal.name, "workspace": workspace.name, "role": row.role}
    audit.record(
        session,
        actor,
        "roleAssignment.delete",
        assignment_target(session, workspace, principal.name),
        details,
    )
    identity.forget_callers_on_commit(session)
    session.commit()


def list_for(session: Session, workspace: Workspace) -> list[dict[str, Any]]:
    rows = session.execute(
        select(Principal.name, RoleAssignment.role)
        .join(Principal, Principal.id == RoleAssignment.principal_id)
        .where(RoleAssignment.workspace_id == workspace.id)
        .order_by(Principal.name)
    ).all()
    return [render(workspace, name, role) for name, role in rows]


def render(workspace: Workspace, principal: str, role: str) -> dict[str, Any]:
    return {"principal": principal, "workspace": workspace.name, "role": role}
