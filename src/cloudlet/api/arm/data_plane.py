"""The data plane's one call azure-ai-ml's ``jobs.download`` makes: ``POST /data/v1.0{ws}/dataversion/
batchGetResolvedUris`` ``{values: [output id, …]}`` → ``{values: {id: {uri, type}}}``, for the
output ids run history's ``rundata`` named (``api.arm.wire.arm_outputs``, ``services.jobs.job_outputs``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, ConfigDict, Field

from cloudlet.api.arm import WS
from cloudlet.api.arm.wire import arm_outputs
from cloudlet.api.deps import Context, context, json_response
from cloudlet.api.routing import UserRoute
from cloudlet.domain.access.roles import Access
from cloudlet.services.access import workspaces
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.jobs import job_outputs

DATA = "/data/v1.0" + WS
MAX_IDS = 256  # a job's outputs, at most (the SDK asks for one job's at a time)

router = APIRouter(tags=["arm-data-plane"], route_class=UserRoute)


class ResolveRequest(BaseModel):
    """``BatchGetResolvedURIs``: the output ids to resolve."""

    model_config = ConfigDict(extra="ignore")
    values: list[Annotated[str, Field(max_length=1024)]] = Field(max_length=MAX_IDS)


@router.post(DATA + "/dataversion/batchGetResolvedUris")
def batch_get_resolved_uris(
    sub: str, rg: str, ws: str, request: ResolveRequest, ctx: Context = Depends(context)
) -> Response:
    ref = WorkspaceRef(sub, rg, ws)
    workspace = workspaces.resolve(ctx.session, ref, ctx.caller, Access.READ)
    wanted = {v: arm_outputs.candidates(v, f"values[{i}]") for i, v in enumerate(request.values)}
    found = job_outputs.first_found(ctx.session, workspace, wanted)
    at = (ref.subscription_id, ref.resource_group, ref.workspace)
    values = {
        v: arm_outputs.resolved(arm_outputs.long_uri(str(o["path"]), *at), str(o["type"]))
        for v, o in found.items()
    }
    return json_response({"values": values})
