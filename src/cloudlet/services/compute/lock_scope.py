"""Which scope a management-lock request names, for a caller allowed to see it (or write there)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.domain.access.roles import Access
from cloudlet.domain.errors import forbidden, not_found
from cloudlet.services.access import workspaces
from cloudlet.services.compute import computes
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.store.schema import ResourceGroup


def scope_for(session: Session, caller: Caller, ref: WorkspaceRef, compute: str | None, write: bool) -> str:
    """The lock scope of a resource group (``ref.workspace`` empty), a workspace or one of its
    computes. Writing on a resource group takes an administrator, on a workspace its Owner; a
    resource group is visible to its workspaces' members (and administrators) only."""
    if not ref.workspace:
        if write and not caller.is_admin:
            raise forbidden(f"'{caller.name}' is not an administrator")
        found = session.scalar(
            select(ResourceGroup).where(
                ResourceGroup.subscription_id == ref.subscription_id, ResourceGroup.name == ref.resource_group
            )
        )
        visible = caller.is_admin or any(
            seen.subscription_id == ref.subscription_id and seen.resource_group == ref.resource_group
            for _, seen in workspaces.list_visible(session, caller)
        )
        if found is None or not visible:
            raise not_found("ResourceGroup", ref.resource_group)
        return ref.rg_scope
    workspace = workspaces.resolve(session, ref, caller, Access.MANAGE if write else Access.READ)
    if compute is None:
        return ref.arm_id
    computes.get(session, workspace, compute)
    return ref.compute_id(compute)
