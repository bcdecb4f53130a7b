"""Subscriptions, resource groups and workspaces."""

from __future__ import annotations

import re
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt
from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from cloudlet.domain.access.roles import Access
from cloudlet.domain.assets.uploads import MAX_WORKSPACE_STORAGE_GIB, UnpackBudget
from cloudlet.domain.bounds import MAX_TAGS, MAX_TEXT
from cloudlet.domain.compute.compute_types import ComputeType
from cloudlet.domain.errors import CloudletError, forbidden, not_found
from cloudlet.domain.jobs.job_spec import DEFAULT_INSTANCE_TYPE
from cloudlet.services.access import audit
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.core import effects
from cloudlet.services.core.clock import iso, utcnow
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.services.core.storage import DataRoot
from cloudlet.store.schema import Location, ResourceGroup, Subscription, Workspace

T = TypeVar("T")


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


_WITH_CHILD: dict[type[Any], Any] = {}


def resolve_child(
    session: Session, ref: WorkspaceRef, caller: Caller, needed: Access, model: type[T], name: str
) -> tuple[Workspace, T | None]:
    """``resolve`` and the workspace's ``model`` row named ``name`` (a compute, a job) in one
    query: the reads a client polls for most cost one round trip less."""
    statement = _WITH_CHILD.get(model)
    if statement is None:
        child: Any = model
        statement = _WITH_CHILD[model] = (
            select(Workspace, child)
            .join(ResourceGroup, ResourceGroup.id == Workspace.resource_group_id)
            .outerjoin(child, (child.workspace_id == Workspace.id) & (child.name == bindparam("name")))
            .where(
                ResourceGroup.subscription_id == bindparam("sub"),
                ResourceGroup.name == bindparam("rg"),
                Workspace.name == bindparam("ws"),
            )
        )
    params = {"sub": ref.subscription_id, "rg": ref.resource_group, "ws": ref.workspace, "name": name}
    row = session.execute(statement, params).first()
    memo = {("workspace", ref): row[0]} if row is not None else {}
    ws = resolve(session, ref, caller, needed, memo)  # the same checks, on the row just read
    return ws, row[1] if row is not None else None


def ref_of_id(session: Session, workspace_id: int) -> WorkspaceRef:
    ws = session.get(Workspace, workspace_id)
    assert ws is not None
    return ref_of(session, ws)


def ref_of(session: Session, ws: Workspace) -> WorkspaceRef:
    rg = session.get(ResourceGroup, ws.resource_group_id)
    assert rg is not None
    return WorkspaceRef(rg.subscription_id, rg.name, ws.name)


WORKSPACE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{1,32}$")
RESOURCE_GROUP_NAME = re.compile(r"^[-\w._()]{1,90}$")
DEFAULT_LOCATION = "local"  # a workspace's location when none is given (bootstrap makes it)


class WorkspaceUpdate(BaseModel):
    """What a caller sets on a workspace (fields left out stay as they are)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, description="must match the URL when given")
    location: str | None = Field(default=None, max_length=64, description="a location (immutable)")
    description: str | None = Field(default=None, max_length=MAX_TEXT)
    tags: dict[str, Annotated[str, Field(max_length=256)]] | None = Field(default=None, max_length=MAX_TAGS)
    allow_ssh_public_access: StrictBool | None = Field(
        default=None, description="false forbids SSH on the workspace's compute instances (I3)"
    )
    default_instance_type: str | None = Field(
        default=None,
        max_length=64,
        description=f"the size a job without 'compute' runs serverless on (null: {DEFAULT_INSTANCE_TYPE})",
    )
    storage_quota_gib: StrictInt | None = Field(
        default=None,
        ge=1,
        le=MAX_WORKSPACE_STORAGE_GIB,
        description="GiB the workspace's data may take; uploads past it are refused (null: the "
        "server's default, CLOUDLET_WORKSPACE_STORAGE_GIB)",
    )


def create_or_update(
    session: Session, ref: WorkspaceRef, update: WorkspaceUpdate, caller: Caller
) -> tuple[Workspace, bool]:
    if not caller.is_admin:
        raise forbidden("only an administrator can create workspaces")
    given = update.model_fields_set
    if update.name is not None and update.name != ref.workspace:
        raise CloudletError(
            "ValidationError", f"the body names '{update.name}' but the URL '{ref.workspace}'", "name"
        )
    if session.get(Subscription, ref.subscription_id) is None:
        raise not_found("Subscription", ref.subscription_id)
    location = update.location
    if location is not None and session.get(Location, location) is None:
        raise CloudletError(
            "ValidationError",
            f"location '{location}' does not exist; see `cloudlet location list`",
            "location",
        )
    rg = session.scalar(
        select(ResourceGroup).where(
            ResourceGroup.subscription_id == ref.subscription_id, ResourceGroup.name == ref.resource_group
        )
    )
    if rg is None:
        if not RESOURCE_GROUP_NAME.fullmatch(ref.resource_group):
            raise CloudletError(
                "ValidationError",
                "a resource group name is 1-90 letters, digits, '_', '-', '.', '(' or ')'",
                "resourceGroup",
            )
        rg = ResourceGroup(
            subscription_id=ref.subscription_id,
            name=ref.resource_group,
            location=location or DEFAULT_LOCATION,
        )
        session.add(rg)
        session.flush()
    ws = session.scalar(
        select(Workspace).where(Workspace.resource_group_id == rg.id, Workspace.name == ref.workspace)
    )
    created = ws is None
    before = {} if ws is None else _audited(ws)
    if ws is None:
        if not WORKSPACE_NAME.fullmatch(ref.workspace):
            raise CloudletError(
                "ValidationError",
                "a workspace name is 2-33 letters, digits, '_' or '-', starting with a letter or digit",
                "workspace",
            )
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
    if "description" in given:
        ws.description = update.description
    if "tags" in given:
        ws.tags = dict(update.tags or {})
    if "allow_ssh_public_access" in given:
        ws.allow_ssh_public_access = update.allow_ssh_public_access
    if "default_instance_type" in given:
        ws.default_instance_type = _instance_type(session, update.default_instance_type)
    if "storage_quota_gib" in given:
        ws.storage_quota_gib = update.storage_quota_gib
    changed = audit.changes(before, _audited(ws))
    if changed:
        action = "workspace.create" if created else "workspace.update"
        audit.record(session, caller.name, action, ref.arm_id, {"changed": changed})
    effects.demand_changed(session)  # serverless jobs may wait for a default size
    session.commit()
    return ws, created


def storage_budget(session: Session, data: DataRoot, ws_id: int) -> UnpackBudget:
    """What one upload into the workspace may write: the server's unpack limits and what is
    left of the workspace's storage quota (its own, or the server's default)."""
    quota = session.scalar(select(Workspace.storage_quota_gib).where(Workspace.id == ws_id))
    return data.budget(ws_id, quota)


def _instance_type(session: Session, name: str | None) -> str | None:
    """A serverless default must be a current cluster size of the catalogue (its own spelling);
    None (or empty) goes back to the built-in default."""
    if not name:
        return None
    catalogue = catalogue_service.current(session, fresh=True)
    return catalogue.require_size(name, ComputeType.AMLCOMPUTE, target="default_instance_type").name


def default_instance_type(ws: Workspace) -> str:
    """The size a job without ``compute`` runs serverless on in this workspace."""
    return ws.default_instance_type or DEFAULT_INSTANCE_TYPE


def _audited(ws: Workspace) -> dict[str, Any]:
    return {
        "location": ws.location,
        "description": ws.description,
        "tags": dict(ws.tags or {}),
        "allow_ssh_public_access": ws.allow_ssh_public_access,
        "default_instance_type": ws.default_instance_type,
        "storage_quota_gib": ws.storage_quota_gib,
    }


def list_visible(session: Session, caller: Caller) -> list[tuple[Workspace, WorkspaceRef]]:
    rows = session.execute(
        select(Workspace, ResourceGroup).join(ResourceGroup, ResourceGroup.id == Workspace.resource_group_id)
    ).all()
    return [
        (ws, WorkspaceRef(rg.subscription_id, rg.name, ws.name))
        for ws, rg in rows
        if caller.can(ws.id, Access.READ)
    ]


def tracking_uri(server_url: str, ref: WorkspaceRef) -> str:
    """A workspace's MLflow tracking URI on a server at SERVER_URL (api/mlflow/;
    ``services/tracking/tracking.py``
    gives it to jobs)."""
    return f"{server_url.rstrip('/')}/mlflow/v1.0{ref.arm_id}"


def render(ws: Workspace, ref: WorkspaceRef, server_url: str | None = None) -> dict[str, Any]:
    """A workspace's native view; on a server at SERVER_URL, with its MLflow tracking URI (the one
    the ARM facade gives, ``az ml workspace show --query mlflow_tracking_uri``)."""
    return {
        "name": ws.name,
        "id": ref.arm_id,
        "subscription_id": ref.subscription_id,
        "resource_group": ref.resource_group,
        "location": ws.location,
        "description": ws.description,
        "tags": ws.tags or {},
        "allow_ssh_public_access": ws.allow_ssh_public_access is not False,
        "default_instance_type": default_instance_type(ws),
        "storage_quota_gib": ws.storage_quota_gib,  # null: the server's default
        "created_on": iso(ws.created_on),
        "mlflow_tracking_uri": tracking_uri(server_url, ref) if server_url else None,
    }
