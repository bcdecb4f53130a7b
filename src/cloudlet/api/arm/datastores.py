"""ARM datastores, as azure-ai-ml reads them to upload local data: ``GET {ws}/datastores``
(``?isDefault=true``), ``GET {ws}/datastores/{name}`` and ``POST …/listSecrets`` (a SAS token for
the Blob service, ``api/blob.py``).

A datastore is a folder of the workspace (``DataRoot.datastore``); ``workspaceblobstore`` always
exists. Its ``accountName`` makes the SDK's ``https://{accountName}.blob.{suffix}`` the Blob
service's path-style URL: ``HOST:PORT/blob/ws<id>#`` turns the rest into a fragment, which the
Azure clients drop. Contributors get a signature that reads and writes the datastore, Readers
one that reads and lists; either ends with the caller's key, user or role (``services/assets/blob_sas``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response

from cloudlet.api.arm.codes import WS, blob_base
from cloudlet.api.deps import Context, context, json_response
from cloudlet.api.routing import UserRoute
from cloudlet.domain.access.roles import Access
from cloudlet.domain.errors import not_found
from cloudlet.services.access import workspaces
from cloudlet.services.assets import blob_sas
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.core.storage import ARTIFACT_DATASTORE, DEFAULT_DATASTORE, DataRoot

if TYPE_CHECKING:
    from cloudlet.store.schema import Workspace


router = APIRouter(tags=["arm"], route_class=UserRoute)
Datastore = Annotated[str, Path(pattern=r"^[A-Za-z0-9._-]{1,255}$", max_length=255)]


def _names(data: DataRoot, workspace_id: int) -> list[str]:
    folder = data.workspace(workspace_id) / "datastores"
    found = (
        {p.name for p in folder.iterdir() if p.is_dir() and not p.is_symlink()} if folder.is_dir() else set()
    )
    return sorted(found | {DEFAULT_DATASTORE, ARTIFACT_DATASTORE})


def _view(request: Request, ref: WorkspaceRef, workspace: Workspace, name: str) -> dict[str, Any]:
    base = blob_base(request).split("://", 1)[1]
    return {
        "id": f"{ref.arm_id}/datastores/{name}",
        "name": name,
        "type": "Microsoft.MachineLearningServices/workspaces/datastores",
        "properties": {
            "datastoreType": "AzureBlob",
            "accountName": f"{base}/{blob_sas.account_name(workspace.id)}#",
            "containerName": name,
            "endpoint": "core.windows.net",
            "protocol": "https",
            "isDefault": name == DEFAULT_DATASTORE,
            "credentials": {"credentialsType": "Sas"},
            "serviceDataAccessAuthIdentity": "None",
            "subscriptionId": ref.subscription_id,
            "resourceGroup": ref.resource_group,
            "description": None,
            "tags": {},
        },
    }


def _workspace(ctx: Context, sub: str, rg: str, ws: str, needed: Access) -> tuple[WorkspaceRef, Workspace]:
    ref = WorkspaceRef(sub, rg, ws)
    return ref, workspaces.resolve(ctx.session, ref, ctx.caller, needed)


def _existing(ctx: Context, workspace: Workspace, name: str) -> str:
    if name not in _names(ctx.state.data, workspace.id):
        raise not_found("Datastore", name)
    return name


@router.get(WS + "/datastores")
def list_datastores(
    sub: str,
    rg: str,
    ws: str,
    request: Request,
    isDefault: Annotated[bool | None, Query()] = None,
    ctx: Context = Depends(context),
) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    names = _names(ctx.state.data, workspace.id)
    if isDefault is not None:
        names = [n for n in names if (n == DEFAULT_DATASTORE) == isDefault]
    return json_response({"value": [_view(request, ref, workspace, n) for n in names]})


@router.get(WS + "/datastores/{name}")
def show_datastore(
    sub: str, rg: str, ws: str, name: Datastore, request: Request, ctx: Context = Depends(context)
) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    return json_response(_view(request, ref, workspace, _existing(ctx, workspace, name)))


@router.post(WS + "/datastores/{name}/listSecrets")
def list_secrets(sub: str, rg: str, ws: str, name: Datastore, ctx: Context = Depends(context)) -> Response:
    """A SAS token (no leading '?') for this datastore alone, for ``blob_sas.DEFAULT_TTL`` and only
    while the caller's credential and role last (the SDK's ``expireAfterHours`` only asks for
    more). The SDK names no folder here (it picks the upload's path afterwards): the datastore
    is the narrowest scope this call can give."""
    _, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    name = _existing(ctx, workspace, name)
    sas = blob_sas.mint(
        ctx.state.token_secret,
        workspace.id,
        name,
        blob_sas.Issuer.of(ctx.caller),
        permissions=blob_sas.permissions_for(ctx.caller, workspace.id),
    )
    return json_response({"secretsType": "Sas", "sasToken": sas})
