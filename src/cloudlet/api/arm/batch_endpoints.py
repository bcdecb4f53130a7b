"""The ARM facade's batch endpoints (azure-ai-ml's ``batch_endpoints``, ``batch_deployments`` and
``batch_endpoints.invoke``): translate with ``api/arm/wire/arm_batch.py``, call
``services/endpoints/batch_endpoints``.

Writes finish in their request (200/201 with ``provisioningState: Succeeded``: the SDK's poller is
done at once). An endpoint's ``scoringUri`` is its ``…/invoke`` route on this TLS listener, which
the SDK posts ``{properties: {inputData: {…}}}`` to with its bearer token; the answer is the job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Body, Depends, Response

from cloudlet.api import arm
from cloudlet.api.arm import ArmWorkspace
from cloudlet.api.arm.wire import arm_batch
from cloudlet.api.deps import Context, context, json_response
from cloudlet.api.openapi import deleted, json_body, success
from cloudlet.api.routes_batch_endpoints import Name
from cloudlet.api.routing import UserRoute
from cloudlet.domain.access.roles import Access
from cloudlet.domain.endpoints import batch_endpoints as rules
from cloudlet.services.access import workspaces
from cloudlet.services.assets import codes
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.endpoints import batch_endpoints as service

if TYPE_CHECKING:
    from cloudlet.store.schema import BatchDeployment, BatchEndpoint, Job, Workspace


router = APIRouter(tags=["arm"], route_class=UserRoute)
EP = arm.WS + "/batchEndpoints/{endpoint}"
MFE = "/mferp/managementfrontend"  # where the SDK's list_jobs reads (discovery's ``api`` + this)
# null is absent (as ARM reads it)
_OBJECT = {
    "type": "object",
    "properties": {"properties": {"type": ["object", "null"]}, "tags": {"type": ["object", "null"]}},
}
ARM_DOCUMENT = json_body(_OBJECT)


def _workspace(ctx: Context, ref: WorkspaceRef, needed: Access) -> tuple[WorkspaceRef, Workspace]:
    return ref, workspaces.resolve(ctx.session, ref, ctx.caller, needed)


def _ws_id(ref: WorkspaceRef) -> str:
    return ref.arm_id


def _endpoint(ctx: Context, row: BatchEndpoint, ref: WorkspaceRef, ws: Workspace) -> dict[str, Any]:
    view = service.render_endpoint(row, ref, arm.https_base(ctx.request, ctx.state))
    return arm_batch.endpoint_to_arm(view, _ws_id(ref), ws.location)


def _deployment(row: BatchDeployment, endpoint: str, ref: WorkspaceRef, ws: Workspace) -> dict[str, Any]:
    view = service.render_deployment(row, endpoint, ref)
    return arm_batch.deployment_to_arm(view, _ws_id(ref), endpoint, None, ws.location)


@router.get(arm.WS + "/batchEndpoints")
def arm_list_batch_endpoints(ref: ArmWorkspace, ctx: Context = Depends(context)) -> Response:
    ref, workspace = _workspace(ctx, ref, Access.READ)
    rows = service.list_endpoints(ctx.session, workspace)
    return json_response(arm.page(ctx.request, rows, lambda r: _endpoint(ctx, r, ref, workspace)))


@router.get(EP)
def arm_get_batch_endpoint(ref: ArmWorkspace, endpoint: str, ctx: Context = Depends(context)) -> Response:
    ref, workspace = _workspace(ctx, ref, Access.READ)
    return json_response(
        _endpoint(ctx, service.get_endpoint(ctx.session, workspace, endpoint), ref, workspace)
    )


@router.put(EP, status_code=200, responses=success(201, "Created"), openapi_extra=ARM_DOCUMENT)
def arm_put_batch_endpoint(
    ref: ArmWorkspace,
    endpoint: Name,
    body: dict[str, Any] = Body(include_in_schema=False),
    ctx: Context = Depends(context),
) -> Response:
    ref, workspace = _workspace(ctx, ref, Access.WRITE)
    with arm.arm_errors(lambda t: t):
        doc = arm_batch.endpoint_from_arm(body, endpoint)
        row, created = service.create_or_update_endpoint(
            ctx.session, ref, workspace, endpoint, doc, ctx.caller
        )
    return json_response(_endpoint(ctx, row, ref, workspace), 201 if created else 200)


@router.delete(EP, **deleted(success(204, "No such endpoint")))
def arm_delete_batch_endpoint(ref: ArmWorkspace, endpoint: str, ctx: Context = Depends(context)) -> Response:
    ref, workspace = _workspace(ctx, ref, Access.WRITE)
    deleted_now = service.delete_endpoint(ctx.session, ref, workspace, endpoint, ctx.caller, missing_ok=True)
    return Response(status_code=200 if deleted_now else 204)


@router.get(EP + "/deployments")
def arm_list_batch_deployments(ref: ArmWorkspace, endpoint: str, ctx: Context = Depends(context)) -> Response:
    ref, workspace = _workspace(ctx, ref, Access.READ)
    row = service.get_endpoint(ctx.session, workspace, endpoint)
    rows = service.deployments(ctx.session, row)
    return json_response(arm.page(ctx.request, rows, lambda d: _deployment(d, endpoint, ref, workspace)))


@router.get(EP + "/deployments/{deployment}")
def arm_get_batch_deployment(
    ref: ArmWorkspace, endpoint: str, deployment: str, ctx: Context = Depends(context)
) -> Response:
    ref, workspace = _workspace(ctx, ref, Access.READ)
    row = service.get_deployment(
        ctx.session, service.get_endpoint(ctx.session, workspace, endpoint), deployment
    )
    return json_response(_deployment(row, endpoint, ref, workspace))


@router.put(
    EP + "/deployments/{deployment}",
    status_code=200,
    responses=success(201, "Created"),
    openapi_extra=ARM_DOCUMENT,
)
def arm_put_batch_deployment(
    ref: ArmWorkspace,
    endpoint: Name,
    deployment: str,
    body: dict[str, Any] = Body(include_in_schema=False),
    ctx: Context = Depends(context),
) -> Response:
    ref, workspace = _workspace(ctx, ref, Access.WRITE)
    props = body.get("properties")
    config = props.get("codeConfiguration") if isinstance(props, dict) else None
    code_id = config.get("codeId") if isinstance(config, dict) else None
    code = codes.snapshot_for(ctx.session, workspace, str(code_id)) if code_id else None
    with arm.arm_errors(arm_batch.arm_target):
        doc = arm_batch.deployment_from_arm(body, endpoint, deployment, code)
        row, _, created = service.create_or_update_deployment(
            ctx.session, ref, workspace, endpoint, deployment, doc, ctx.caller, ctx.state.data
        )
    return json_response(_deployment(row, endpoint, ref, workspace), 201 if created else 200)


@router.delete(EP + "/deployments/{deployment}", **deleted())
def arm_delete_batch_deployment(
    ref: ArmWorkspace, endpoint: str, deployment: str, ctx: Context = Depends(context)
) -> Response:
    ref, workspace = _workspace(ctx, ref, Access.WRITE)
    service.delete_deployment(ctx.session, ref, workspace, endpoint, deployment, ctx.caller)
    return Response(status_code=200)


@router.post(EP + "/invoke", openapi_extra=ARM_DOCUMENT)
def arm_invoke_batch_endpoint(
    ref: ArmWorkspace,
    endpoint: Name,
    body: dict[str, Any] = Body(include_in_schema=False),
    ctx: Context = Depends(context),
) -> Response:
    """``batch_endpoints.invoke``: the SDK names a deployment in ``azureml-model-deployment``."""
    ref, workspace = _workspace(ctx, ref, Access.WRITE)
    wanted = arm_batch.invocation_from_arm(body)
    deployment = ctx.request.headers.get("azureml-model-deployment")
    if deployment:
        wanted["deployment_name"] = deployment
    with arm.arm_errors(arm_batch.invocation_target):
        job = service.invoke(
            ctx.session, workspace, endpoint, rules.parse_invoke(wanted), ctx.caller, ctx.state.data
        )
    return json_response(arm_batch.invocation_to_arm(_ws_id(ref), endpoint, job.name, job.status))


@router.get(MFE + EP + "/jobs")
def arm_list_batch_endpoint_jobs(
    ref: ArmWorkspace, endpoint: str, ctx: Context = Depends(context)
) -> Response:
    """``batch_endpoints.list_jobs``: the endpoint's invocations, newest first, as ``BatchJob``s
    (the SDK asks the workspace's ``api`` service, under Azure's management-frontend prefix)."""
    ref, workspace = _workspace(ctx, ref, Access.READ)
    rows = service.invocations(ctx.session, workspace, endpoint)

    def render(job: Job) -> dict[str, Any]:
        return arm_batch.invocation_to_arm(_ws_id(ref), endpoint, job.name, job.status)

    return json_response(arm.page(ctx.request, rows, render))
