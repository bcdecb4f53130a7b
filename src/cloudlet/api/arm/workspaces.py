"""ARM workspaces: get and list (creating them stays an administrator's native call)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, Response

from cloudlet.api import arm
from cloudlet.api.deps import Context, context, json_response
from cloudlet.api.routing import UserRoute
from cloudlet.domain.access.roles import Access
from cloudlet.services.access import workspaces
from cloudlet.services.core.clock import iso
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.tracking import tracking

if TYPE_CHECKING:
    from cloudlet.store.schema import Workspace


router = APIRouter(tags=["azureml"], route_class=UserRoute)
WORKSPACE_TYPE = "Microsoft.MachineLearningServices/workspaces"


def render(ctx: Context, ws: Workspace, ref: WorkspaceRef) -> dict[str, Any]:
    base = arm.https_base(ctx.request, ctx.state)
    tenant = ctx.state.installation_id
    workspace_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"cloudlet:{tenant}:workspace:{ws.id}"))
    return {
        "id": ref.arm_id,
        "name": ws.name,
        "type": WORKSPACE_TYPE,
        "location": ws.location,
        "tags": ws.tags or {},
        "kind": "Default",
        "sku": {"name": "Basic", "tier": "Basic"},
        "identity": {"type": "SystemAssigned", "tenantId": tenant},
        "properties": {
            "friendlyName": ws.name,
            "description": ws.description,
            "workspaceId": workspace_id,
            # The run-history service's discovery document (api/arm/history.py, with the jobs).
            "discoveryUrl": f"{base}/discovery/workspaces/{workspace_id}",
            # MLflow's tracking API for this workspace (api/mlflow/), on this TLS listener: plain
            # MLflow takes it as written (MLFLOW_TRACKING_TOKEN and REQUESTS_CA_BUNDLE set).
            "mlFlowTrackingUri": tracking.tracking_uri(base, ref),
            "provisioningState": "Succeeded",
            "creationTime": iso(ws.created_on),
            "publicNetworkAccess": "Enabled",
            "hbiWorkspace": False,
        },
    }


@router.get(arm.WS)
def get_workspace(sub: str, rg: str, ws: str, ctx: Context = Depends(context)) -> Response:
    ref = arm.ref(sub, rg, ws)
    return json_response(render(ctx, workspaces.resolve(ctx.session, ref, ctx.caller, Access.READ), ref))


def _list(ctx: Context, sub: str, rg: str | None) -> Response:
    rows = [
        (w, ref)
        for w, ref in workspaces.list_visible(ctx.session, ctx.caller)
        if ref.subscription_id == sub and (rg is None or ref.resource_group == rg)
    ]
    rows.sort(key=lambda row: (row[1].resource_group, row[0].name))
    return json_response(arm.page(ctx.request, rows, lambda row: render(ctx, *row)))


@router.get(arm.RG + arm.PROVIDER + "/workspaces")
def list_workspaces(sub: str, rg: str, ctx: Context = Depends(context)) -> Response:
    return _list(ctx, sub, rg)


@router.get(arm.SUB + arm.PROVIDER + "/workspaces")
def list_subscription_workspaces(sub: str, ctx: Context = Depends(context)) -> Response:
    return _list(ctx, sub, None)
