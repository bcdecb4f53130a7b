"""Subscriptions, resource groups and workspaces."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from cloudlet.domain.errors import CloudletError, forbidden, not_found
from cloudlet.domain.roles import Access
from cloudlet.services.clock import iso, utcnow
from cloudlet.services.context import Caller, WorkspaceRef
from cloudlet.store.schema import ResourceGroup, Subscription, Workspace


@dataclass(frozen=True)
class WorkspaceRow:
    workspace: Workspace
    ref: WorkspaceRef


# Built once: statement construction costs more than the query itself on the hot read path.
_BY_REF = (
    select(Workspace)
    .join(ResourceGroup, ResourceGroup.id == Workspace.resource_group_id)
    .where(
        ResourceGroup.subscription_id == bindparam("sub"),
        ResourceGroup.name == bindparam("rg"),
        Workspace.name == bindparam("ws"),
    )
)


def resolve(
    session: Session,
    ref: WorkspaceRef,
    caller: Caller,
    needed: Access,
    memo: dict[Any, Any] | None = None,
) -> Workspace:
    """The workspace, if it exists and the caller may act on it; 404 hides others' workspaces.
    MEMO (one transaction's lookups) spares a batch of requests the same query."""
    key = ("workspace", ref)
    ws = memo.get(key) if memo is not None else None
    if ws is None:
        params = {"sub": ref.subscription_id, "rg": ref.resource_group, "ws": ref.workspace}
        ws = session.scalar(_BY_REF, params)
        if memo is not None and ws is not None:
            memo[key] = ws
    if ws is None or not caller.can(ws.id, Access.READ):
        raise not_found("Workspace", ref.workspace)
    if not caller.can(ws.id, needed):
        verb = {Access.WRITE: "change", Access.MANAGE: "manage"}.get(needed, "read")
        raise forbidden(
            f"'{caller.name}' may not {verb} resources in workspace '{ref.workspace}' "
            f"(needs role {'Contributor' if needed == Access.WRITE else 'Owner'}).",
            target=ref.workspace,
        )
    return ws


def ref_of(session: Session, ws: Workspace) -> WorkspaceRef:
    rg = session.get(ResourceGroup, ws.resource_group_id)
    assert rg is not None
    return WorkspaceRef(rg.subscription_id, rg.name, ws.name)


def create_or_update(
    session: Session, ref: WorkspaceRef, body: dict[str, Any], caller: Caller
) -> tuple[Workspace, bool]:
    if not caller.is_admin:
        raise forbidden("only an administrator can create workspaces")
    unknown = set(body) - {"location", "description", "tags", "name", "allow_ssh_public_access"}
    if unknown:
        field = sorted(unknown)[0]
        raise CloudletError("ValidationError", f"unknown field '{field}' for a workspace; remove it", field)
    if session.get(Subscription, ref.subscription_id) is None:
        raise not_found("Subscription", ref.subscription_id)
    location = body.get("location")
    rg = session.scalar(
        select(ResourceGroup).where(
            ResourceGroup.subscription_id == ref.subscription_id, ResourceGroup.name == ref.resource_group
        )
    )
    if rg is None:
        rg = ResourceGroup(
            subscription_id=ref.subscription_id, name=ref.resource_group, location=location or "local"
        )
        session.add(rg)
        session.flush()
    ws = session.scalar(
        select(Workspace).where(Workspace.resource_group_id == rg.id, Workspace.name == ref.workspace)
    )
    created = ws is None
    if ws is None:
        ws = Workspace(
            resource_group_id=rg.id,
            name=ref.workspace,
            location=location or rg.location,
            tags={},
            created_on=utcnow(),
        )
        session.add(ws)
    elif location and location != ws.location:
        raise CloudletError(
            "ImmutableField", "a workspace's location cannot change; create a new workspace", "location", 409
        )
    if "description" in body:
        ws.description = body["description"]
    if "tags" in body:
        ws.tags = dict(body["tags"] or {})
    if "allow_ssh_public_access" in body:
        ws.allow_ssh_public_access = _ssh_setting(body["allow_ssh_public_access"])
    session.flush()
    return ws, created


def _ssh_setting(value: Any) -> bool | None:
    """``allow_ssh_public_access``: false forbids SSH on the workspace's instances (I3)."""
    if value is None or isinstance(value, bool):
        return value
    raise CloudletError(
        "ValidationError",
        f"'allow_ssh_public_access' must be true or false, got {value!r}",
        "allow_ssh_public_access",
    )


def list_visible(session: Session, caller: Caller) -> list[tuple[Workspace, WorkspaceRef]]:
    rows = session.execute(
        select(Workspace, ResourceGroup).join(ResourceGroup, ResourceGroup.id == Workspace.resource_group_id)
    ).all()
    return [
        (ws, WorkspaceRef(rg.subscription_id, rg.name, ws.name))
        for ws, rg in rows
        if caller.can(ws.id, Access.READ)
    ]


def render(ws: Workspace, ref: WorkspaceRef) -> dict[str, Any]:
    return {
        "name": ws.name,
        "id": ref.arm_id,
        "subscription_id": ref.subscription_id,
        "resource_group": ref.resource_group,
        "location": ws.location,
        "description": ws.description,
        "tags": ws.tags or {},
        "allow_ssh_public_access": ws.allow_ssh_public_access is not False,
        "created_on": iso(ws.created_on),
    }
