"""The ARM facade's online endpoints (azure-ai-ml's ``online_endpoints`` and ``online_deployments``):
translate with ``api/arm/wire/arm_online.py``, call ``services/endpoints/online_endpoints`` (the same rules as
the
native routes in ``api/routes_online.py``), tell the replica runtime after each commit.

Long-running operations: an endpoint's PUT answers 200/201 with no polling header (body polling:
it is Succeeded at once). A deployment's PUT answers 200/201 with ``Azure-AsyncOperation``
naming that write's operation (``…/deployments/{d}/operations/{generation}``): InProgress until
its replicas are ready (Succeeded) or gave up (``{"status": "Failed", "error": {code, message}}``,
which the SDK raises as ``HttpResponseError`` with the reason, as ARM fails an operation), and
the SDK re-GETs the deployment when it succeeded. DELETE finishes in its request (200; 204 when
there is nothing to delete). ``scoringUri`` is the gateway's path-style route on
this TLS listener (``/online/{sub}/{rg}/{ws}/{e}/score``), which ``online_endpoints.invoke``
posts to with a key or an ``aml_token``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Body, Depends, Response

from cloudlet.api import arm
from cloudlet.api.arm import ArmWorkspace
from cloudlet.api.arm.wire import arm_online
from cloudlet.api.deps import Context, context, json_response
from cloudlet.api.openapi import deleted, json_body, nullable, success
from cloudlet.api.routes_online import KEYS_SCHEMA, LOGS_SCHEMA
from cloudlet.api.routing import UserRoute
from cloudlet.domain.access.roles import Access
from cloudlet.domain.endpoints.online_endpoints import log_lines
from cloudlet.services.access import workspaces
from cloudlet.services.assets import codes
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.endpoints import online_endpoints as service
from cloudlet.services.endpoints import online_writes as writes

if TYPE_CHECKING:
    from cloudlet.store.schema import OnlineDeployment, OnlineEndpoint, Workspace


router = APIRouter(tags=["azureml"], route_class=UserRoute)
EP = arm.WS + "/onlineEndpoints/{endpoint}"
DEP = EP + "/deployments/{deployment}"
ARM_BODY = Body(include_in_schema=False)
_OBJ = {"type": "object"}
ENDPOINT_DOCUMENT = json_body(
    {
        "type": "object",
        "description": "an ARM online endpoint, as azure-ai-ml sends it (api/arm/wire/arm_online.py)",
        "properties": nullable(
            {
                "location": {"type": "string"},
                "kind": {"type": "string"},
                "tags": {"type": "object", "additionalProperties": {"type": "string"}},
                "identity": _OBJ,
                "properties": {
                    "type": "object",
                    "properties": {
                        # null: left as it is (Key auth, no mirrored traffic on a new endpoint)
                        **nullable(
                            {
                                "authMode": {
                                    "type": "string",
                                    "enum": ["Key", "AMLToken"],
                                },  # AADToken: refused
                                "description": {"type": "string"},
                                "traffic": _OBJ,
                                "mirrorTraffic": _OBJ,
                            }
                        ),
                    },
                },
            }
        ),
    }
)
DEPLOYMENT_DOCUMENT = json_body(
    {
        "type": "object",
        "description": "an ARM online deployment, as azure-ai-ml sends it (api/arm/wire/arm_online.py)",
        "properties": {
            "location": {"type": "string"},
            "kind": {"type": "string"},
            "tags": {"type": "object", "additionalProperties": {"type": "string"}},
            "sku": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "capacity": {"type": "integer"}},
            },
            "properties": {
                "type": "object",
                "properties": {
                    "endpointComputeType": {"type": "string"},
                    "model": {"type": "string"},
                    "codeConfiguration": {
                        "type": "object",
                        "properties": {"codeId": {"type": "string"}, "scoringScript": {"type": "string"}},
                    },
                    "environmentId": {"type": "string"},
                    "instanceType": {"type": "string"},
                    "requestSettings": _OBJ,
                    "livenessProbe": _OBJ,
                    "readinessProbe": _OBJ,
                    "scaleSettings": _OBJ,
                },
            },
        },
    }
)


def _workspace(ctx: Context, ref: WorkspaceRef, needed: Access) -> tuple[WorkspaceRef, Workspace]:
    return ref, workspaces.resolve(ctx.session, ref, ctx.caller, needed)


def _endpoint_row(
    ctx: Context, ref: WorkspaceRef, endpoint: str, needed: Access
) -> tuple[WorkspaceRef, Workspace, OnlineEndpoint]:
    ref, workspace = _workspace(ctx, ref, needed)
    return ref, workspace, service.get_endpoint(ctx.session, workspace, endpoint)


def _endpoint(ctx: Context, row: OnlineEndpoint, ref: WorkspaceRef, ws: Workspace) -> dict[str, Any]:
    view = service.render_endpoint(row, ref, arm.https_base(ctx.request, ctx.state))
    return arm_online.endpoint_to_arm(view, ref.arm_id, ws.location)


def _deployment(
    ctx: Context, row: OnlineDeployment, endpoint: str, ref: WorkspaceRef, ws: Workspace
) -> dict[str, Any]:
    view = service.render_deployment(row, ref, endpoint, {})
    return arm_online.deployment_to_arm(view, ref.arm_id, endpoint, None, ws.location)


@router.get(arm.WS + "/onlineEndpoints")
def arm_list_online_endpoints(ref: ArmWorkspace, ctx: Context = Depends(context)) -> Response:
    ref, workspace = _workspace(ctx, ref, Access.READ)
    rows = service.list_endpoints(ctx.session, workspace)
    return json_response(arm.page(ctx.request, rows, lambda r: _endpoint(ctx, r, ref, workspace)))


@router.get(EP)
def arm_get_online_endpoint(ref: ArmWorkspace, endpoint: str, ctx: Context = Depends(context)) -> Response:
    ref, workspace, row = _endpoint_row(ctx, ref, endpoint, Access.READ)
    return json_response(_endpoint(ctx, row, ref, workspace))


@router.put(EP, status_code=200, responses=success(201, "Created"), openapi_extra=ENDPOINT_DOCUMENT)
def arm_put_online_endpoint(
    ref: ArmWorkspace, endpoint: str, body: Any = ARM_BODY, ctx: Context = Depends(context)
) -> Response:
    """Create or update (begin_create_or_update; also how the SDK sets ``endpoint.traffic``)."""
    ref, workspace = _workspace(ctx, ref, Access.WRITE)
    with arm.arm_errors(arm_online.arm_target):
        doc = arm_online.endpoint_from_arm(body, endpoint)
        written = writes.put_endpoint(
            ctx.session, ref, workspace, endpoint, doc, ctx.caller.name, keep_auth_mode=True
        )
    return json_response(_endpoint(ctx, written.row, ref, workspace), 201 if written.created else 200)


@router.patch(EP, openapi_extra=ENDPOINT_DOCUMENT)
def arm_patch_online_endpoint(
    ref: ArmWorkspace, endpoint: str, body: Any = ARM_BODY, ctx: Context = Depends(context)
) -> Response:
    """Tags, traffic and mirror traffic of an existing endpoint (the rest stays)."""
    ref, workspace, row = _endpoint_row(ctx, ref, endpoint, Access.WRITE)
    with arm.arm_errors(arm_online.arm_target):
        doc = arm_online.endpoint_patch(body, row.spec)
        written = writes.put_endpoint(ctx.session, ref, workspace, endpoint, doc, ctx.caller.name)
    return json_response(_endpoint(ctx, written.row, ref, workspace))


@router.delete(EP, **deleted(success(204, "No such endpoint")))
def arm_delete_online_endpoint(ref: ArmWorkspace, endpoint: str, ctx: Context = Depends(context)) -> Response:
    ref, workspace = _workspace(ctx, ref, Access.WRITE)
    gone = writes.delete_endpoint(ctx.session, ref, workspace, endpoint, ctx.caller.name, missing_ok=True)
    return Response(status_code=200 if gone else 204)


@router.post(EP + "/listKeys")
def arm_list_online_endpoint_keys(
    ref: ArmWorkspace, endpoint: str, ctx: Context = Depends(context)
) -> Response:
    _, _, row = _endpoint_row(ctx, ref, endpoint, Access.WRITE)
    return json_response(service.keys(row))


@router.post(EP + "/token")
def arm_online_endpoint_token(ref: ArmWorkspace, endpoint: str, ctx: Context = Depends(context)) -> Response:
    _, _, row = _endpoint_row(ctx, ref, endpoint, Access.WRITE)
    return json_response(service.token(ctx.state.token_secret, row))


@router.post(
    EP + "/regenerateKeys",
    status_code=200,
    response_class=Response,  # no body, as Azure's
    responses={200: {"description": "the key was made anew (no body)", "content": {}}},
    openapi_extra=json_body(KEYS_SCHEMA),
)
def arm_regenerate_online_endpoint_keys(
    ref: ArmWorkspace, endpoint: str, body: Any = ARM_BODY, ctx: Context = Depends(context)
) -> Response:
    """begin_regenerate_keys: finishes in its request (200, no polling headers)."""
    ref, _, row = _endpoint_row(ctx, ref, endpoint, Access.WRITE)
    key_type = body.get("keyType") if isinstance(body, dict) else None
    writes.regenerate(ctx.session, ref, row, str(key_type or ""), ctx.caller.name)
    return Response(status_code=200)


@router.get(EP + "/deployments")
def arm_list_online_deployments(
    ref: ArmWorkspace, endpoint: str, ctx: Context = Depends(context)
) -> Response:
    ref, workspace, row = _endpoint_row(ctx, ref, endpoint, Access.READ)
    rows = service.deployments_of(ctx.session, row)
    return json_response(arm.page(ctx.request, rows, lambda d: _deployment(ctx, d, endpoint, ref, workspace)))


@router.get(DEP)
def arm_get_online_deployment(
    ref: ArmWorkspace, endpoint: str, deployment: str, ctx: Context = Depends(context)
) -> Response:
    ref, workspace, row = _endpoint_row(ctx, ref, endpoint, Access.READ)
    found = service.get_deployment(ctx.session, row, deployment)
    return json_response(_deployment(ctx, found, endpoint, ref, workspace))


@router.put(DEP, status_code=200, responses=success(201, "Created"), openapi_extra=DEPLOYMENT_DOCUMENT)
def arm_put_online_deployment(
    ref: ArmWorkspace,
    endpoint: str,
    deployment: str,
    body: Any = ARM_BODY,
    ctx: Context = Depends(context),
) -> Response:
    """Create or update; the SDK polls the GET until ``provisioningState`` is Succeeded or Failed."""
    ref, workspace, row = _endpoint_row(ctx, ref, endpoint, Access.WRITE)
    props = body.get("properties") if isinstance(body, dict) else None
    config = props.get("codeConfiguration") if isinstance(props, dict) else None
    code_id = config.get("codeId") if isinstance(config, dict) else None
    code = codes.snapshot_for(ctx.session, workspace, str(code_id)) if code_id else None
    current = next((d.spec for d in service.deployments_of(ctx.session, row) if d.name == deployment), None)
    with arm.arm_errors(arm_online.arm_target):
        doc = arm_online.deployment_from_arm(body, endpoint, deployment, code, current)
        written = writes.put_deployment(
            ctx.session,
            ref,
            workspace,
            row,
            deployment,
            doc,
            ctx.caller.name,
            data=ctx.state.data,
        )
    rendered = _deployment(ctx, written.row, endpoint, ref, workspace)
    generation = written.row.generation
    url = f"{arm.https_base(ctx.request, ctx.state)}{ref.arm_id}/onlineEndpoints/{endpoint}"
    url += f"/deployments/{deployment}/operations/{generation}"
    headers = {"Azure-AsyncOperation": url, "Retry-After": "1"}
    return json_response(rendered, 201 if written.created else 200, headers)


@router.get(DEP + "/operations/{generation}")
def arm_online_deployment_operation(
    ref: ArmWorkspace,
    endpoint: str,
    deployment: str,
    generation: int,
    ctx: Context = Depends(context),
) -> Response:
    """What a deployment PUT's ``Azure-AsyncOperation`` points at: that write's roll-out."""
    _, _, row = _endpoint_row(ctx, ref, endpoint, Access.READ)
    found = service.get_deployment(ctx.session, row, deployment)
    body = arm_online.operation_status(found.generation, found.provisioning_state, found.reason, generation)
    body["id"] = str(ctx.request.url).split("?", 1)[0]
    headers = {"Retry-After": "1"} if body["status"] == "InProgress" else None
    return json_response(body, 200, headers)


@router.delete(DEP, **deleted(success(204, "No such deployment")))
def arm_delete_online_deployment(
    ref: ArmWorkspace, endpoint: str, deployment: str, ctx: Context = Depends(context)
) -> Response:
    ref, _, row = _endpoint_row(ctx, ref, endpoint, Access.WRITE)
    with arm.arm_errors(arm_online.arm_target):
        gone = writes.delete_deployment(ctx.session, ref, row, deployment, ctx.caller.name, missing_ok=True)
    return Response(status_code=200 if gone else 204)


@router.post(DEP + "/getLogs", openapi_extra=json_body(LOGS_SCHEMA, required=False))
def arm_online_deployment_logs(
    ref: ArmWorkspace,
    endpoint: str,
    deployment: str,
    body: Any = Body(default=None, include_in_schema=False),
    ctx: Context = Depends(context),
) -> Response:
    _, workspace, row = _endpoint_row(ctx, ref, endpoint, Access.READ)
    service.get_deployment(ctx.session, row, deployment)
    count = log_lines(body)
    return json_response({"content": ctx.state.online.logs(workspace.id, endpoint, deployment, count)})
