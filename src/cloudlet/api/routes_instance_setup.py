"""An instance's setup-script logs: ``GET {ws}/computes/{name}/setup-logs`` (owner, or a workspace
Owner). Each configured script's last result (``services/compute/instance_reports.setup_logs``) with up to
64 KiB of its log from the OS disk (``<os disk>/logs/<kind>_script.log``)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response

from cloudlet.api.deps import Context, context, json_response
from cloudlet.api.routing import UserRoute
from cloudlet.domain.access.roles import Access
from cloudlet.domain.compute.compute_types import ComputeType
from cloudlet.domain.errors import CloudletError, forbidden
from cloudlet.services.access import workspaces
from cloudlet.services.compute import computes, instance_reports
from cloudlet.services.core.context import WorkspaceRef

WS = "/subscriptions/{sub}/resourceGroups/{rg}/workspaces/{ws}"
router = APIRouter(prefix="/api/v1", tags=["computes"], route_class=UserRoute)


@router.get(WS + "/computes/{name}/setup-logs")
def setup_logs(sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)) -> Response:
    workspace = workspaces.resolve(ctx.session, WorkspaceRef(sub, rg, ws), ctx.caller, Access.READ)
    compute = computes.get(ctx.session, workspace, name)
    if compute.type != ComputeType.COMPUTE_INSTANCE:
        raise CloudletError(
            "OperationNotSupported",
            f"'{name}' is {compute.type}; setup scripts are for compute instances",
            name,
        )
    if compute.owner != ctx.caller.name and not ctx.caller.can(workspace.id, Access.MANAGE):
        raise forbidden(
            f"only the owner '{compute.owner}' of instance '{name}' may read its setup logs", name
        )
    node = instance_reports.latest_node(ctx.session, compute)
    return json_response(instance_reports.setup_logs(ctx.state.data, compute, node))
