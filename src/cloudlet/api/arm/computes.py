"""ARM computes: get, list, put (create and update), patch, delete (Delete and Detach),
start/stop/restart, listNodes; and per location: vmSizes, usages and the operation status that
``Azure-AsyncOperation`` points at. Every rule is the native one (``services/compute/computes.py``,
``quotas``, ``catalogue``); these routes only translate (``api/arm/wire/arm_compute.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from fastapi import APIRouter, Body, Depends, Query, Response

from cloudlet.api import arm
from cloudlet.api.arm.wire import arm_compute
from cloudlet.api.deps import Context, context, json_response
from cloudlet.api.openapi import json_body, nullable, success
from cloudlet.api.routes_admin import require_pool
from cloudlet.api.routing import UserRoute
from cloudlet.domain.access.roles import Access
from cloudlet.domain.bounds import MAX_CLUSTER_NODES
from cloudlet.domain.errors import CloudletError
from cloudlet.services.access import workspaces
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import computes, locations, operations, quotas
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.core.clock import iso
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.views import computes as compute_view

if TYPE_CHECKING:
    from cloudlet.store.schema import Compute, Workspace


router = APIRouter(tags=["azureml"], route_class=UserRoute)
COMPUTE = arm.WS + "/computes/{name}"
ARM_BODY = Body(include_in_schema=False)
ARM_DOCUMENT = json_body(
    {
        "type": "object",
        "description": "an ARM compute resource, as azure-ai-ml sends it (api/arm/wire/arm_compute.py)",
        "properties": {
            **nullable({"location": {"type": "string"}}),
            "tags": {"type": "object", "additionalProperties": {"type": "string"}},
            "identity": {
                "type": "object",
                "properties": nullable(  # null: as None
                    {
                        "type": {
                            "type": "string",
                            "enum": ["SystemAssigned", "UserAssigned", "SystemAssigned,UserAssigned", "None"],
                        }
                    }
                ),
            },
            "properties": {
                "type": "object",
                "properties": {
                    "computeType": {"type": "string", "enum": list(arm_compute.ARM_TYPES.values())},
                    **nullable(
                        {
                            "computeLocation": {"type": "string"},
                            "description": {"type": "string"},
                            "resourceId": {"type": "string"},
                        }
                    ),
                    "properties": {"type": "object", "description": "vmSize, vmPriority, scaleSettings, …"},
                    "scaleSettings": {"type": "object", "description": "PATCH: the new scale settings"},
                },
            },
        },
    }
)

# What a PATCH reads (anything else in the document is ignored): tags, or scale settings.
SCALE_KEYS = ("minNodeCount", "maxNodeCount", "nodeIdleTimeBeforeScaleDown")
_SCALE = {
    "type": "object",
    "properties": {
        "minNodeCount": {"type": "integer", "minimum": 0, "maximum": MAX_CLUSTER_NODES},
        "maxNodeCount": {"type": "integer", "minimum": 1, "maximum": MAX_CLUSTER_NODES},
        "nodeIdleTimeBeforeScaleDown": {
            "type": "string",
            "description": "ISO 8601 duration, e.g. PT120S",
            "pattern": f"^(?!PT?$){arm_compute.ISO_DURATION.pattern}$",
        },
    },
    "anyOf": [{"required": [key]} for key in SCALE_KEYS],
}
PATCH_DOCUMENT = json_body(
    {
        "type": "object",
        "description": "ARM's ComputeUpdate: tags, or properties.scaleSettings (clusters)",
        "properties": {
            "tags": {"type": "object", "additionalProperties": {"type": "string"}},
            "properties": {"type": "object", "properties": {"scaleSettings": _SCALE}},
        },
        "anyOf": [
            {"required": ["tags"]},
            {"required": ["properties"], "properties": {"properties": {"required": ["scaleSettings"]}}},
        ],
    }
)


def _workspace(ctx: Context, sub: str, rg: str, ws: str, needed: Access) -> tuple[WorkspaceRef, Workspace]:
    ref = arm.ref(sub, rg, ws)
    return ref, workspaces.resolve(ctx.session, ref, ctx.caller, needed)


def _view(ctx: Context, ref: WorkspaceRef, compute: Compute) -> dict[str, Any]:
    return arm_compute.to_arm(compute_view.view(ctx.session, ref, compute, ctx.state.endpoint))


@router.get(arm.WS + "/computes")
def list_computes(sub: str, rg: str, ws: str, ctx: Context = Depends(context)) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    rows = computes.list_all(ctx.session, workspace)
    return json_response(arm.page(ctx.request, rows, lambda c: _view(ctx, ref, c)))


@router.get(COMPUTE)
def get_compute(sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)) -> Response:
    ref = arm.ref(sub, rg, ws)
    _, compute = computes.readable(ctx.session, ref, ctx.caller, name)
    return json_response(_view(ctx, ref, compute))


@router.put(
    COMPUTE,
    status_code=200,
    responses=success(201, "Created: the create operation runs; follow `Azure-AsyncOperation`"),
    openapi_extra=ARM_DOCUMENT,
)
def put_compute(
    sub: str, rg: str, ws: str, name: str, body: Any = ARM_BODY, ctx: Context = Depends(context)
) -> Response:
    """Create or update (the SDK's begin_create_or_update, begin_update): 201 or 200 with the
    compute and ``Azure-AsyncOperation``; once that says Succeeded, GET shows the final state."""
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
    with arm.arm_errors(arm_compute.arm_target):
        doc = arm_compute.from_arm(body, name)
        result = computes.create_or_update(
            ctx.session, ref, workspace, name, doc, ctx.caller, ctx.state.endpoint
        )
    headers = arm.lro_headers(ctx, result.compute.location, result.operation)
    return json_response(arm_compute.to_arm(result.view), 201 if result.created else 200, headers)


def _patch_doc(body: Any) -> dict[str, Any]:
    """ARM's ComputeUpdate: ``properties.scaleSettings`` (clusters) and ``tags``."""
    resource = arm_compute.as_object(body, "$")
    out: dict[str, Any] = {}
    target = "properties.scaleSettings"
    props = arm_compute.given_object(resource, "properties", "properties")
    scale = arm_compute.given_object(props, "scaleSettings", target)
    if "scaleSettings" in props and all(scale.get(key) is None for key in SCALE_KEYS):
        raise CloudletError(
            "ValidationError", f"scaleSettings gives none of {', '.join(SCALE_KEYS)}: give one", target
        )
    for arm_name, native in (("minNodeCount", "min_instances"), ("maxNodeCount", "max_instances")):
        if scale.get(arm_name) is not None:
            out[native] = scale[arm_name]
    if scale.get("nodeIdleTimeBeforeScaleDown") is not None:
        out["idle_time_before_scale_down"] = arm_compute.iso_seconds(
            scale["nodeIdleTimeBeforeScaleDown"], target + ".nodeIdleTimeBeforeScaleDown"
        )
    if resource.get("tags") is not None:
        out["tags"] = resource["tags"]
    if not out:
        raise CloudletError(
            "ValidationError",
            "nothing to update: send properties.scaleSettings (minNodeCount, maxNodeCount, "
            "nodeIdleTimeBeforeScaleDown) or tags",
            "properties",
        )
    return out


@router.patch(COMPUTE, openapi_extra=PATCH_DOCUMENT)
def patch_compute(
    sub: str, rg: str, ws: str, name: str, body: Any = ARM_BODY, ctx: Context = Depends(context)
) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
    with arm.arm_errors(arm_compute.arm_target):
        doc = _patch_doc(body)
        result = computes.patch(ctx.session, ref, workspace, name, doc, ctx.caller, ctx.state.endpoint)
    headers = arm.lro_headers(ctx, result.compute.location, result.operation)
    return json_response(arm_compute.to_arm(result.view), 200, headers)


@router.delete(
    COMPUTE,
    status_code=202,
    response_class=Response,
    responses={202: {"description": "Accepted: poll the Azure-AsyncOperation URL", "content": None}},
)
def delete_compute(
    sub: str,
    rg: str,
    ws: str,
    name: str,
    action: Literal["Delete", "Detach"] = Query("Delete", alias="underlyingResourceAction"),
    ctx: Context = Depends(context),
) -> Response:
    """Delete (cloudlet's own computes) or Detach (attached ones: the machine stays)."""
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
    location = computes.get(ctx.session, workspace, name).location
    op = computes.delete(ctx.session, ref, workspace, name, ctx.caller, detach=action == "Detach")
    return Response(status_code=202, headers=arm.lro_headers(ctx, location, op))


@router.post(COMPUTE + "/listNodes")
def list_nodes(sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)) -> Response:
    _, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    compute = computes.get(ctx.session, workspace, name)
    nodes = node_service.live_nodes(ctx.session, compute.id)
    return json_response({"nodes": [arm_compute.node_to_arm(node_service.render(n)) for n in nodes]})


@router.post(COMPUTE + "/{action}", status_code=202)
def compute_action(
    sub: str,
    rg: str,
    ws: str,
    name: str,
    action: Literal["start", "stop", "restart"],
    ctx: Context = Depends(context),
) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
    location = computes.get(ctx.session, workspace, name).location
    op = computes.act(ctx.session, ref, workspace, name, action, ctx.caller)
    return Response(status_code=202, headers=arm.lro_headers(ctx, location, op))


# -- per location -----------------------------------------------------------------------------
@router.get(arm.LOCATION + "/computeOperationsStatus/{op_id}")
def operation_status(sub: str, location: str, op_id: str, ctx: Context = Depends(context)) -> Response:
    """What ``Azure-AsyncOperation`` points at: InProgress (with ``Retry-After``), Succeeded, or
    Failed with the operation's error (the SDK raises it as ``HttpResponseError``)."""
    op = operations.visible(ctx.session, ctx.caller, op_id)
    body: dict[str, Any] = {
        "id": str(ctx.request.url).split("?", 1)[0],
        "name": op.id,
        "status": op.status,
        "startTime": iso(op.created_on),
        "endTime": iso(op.ended_on),
    }
    if op.status == operations.FAILED:
        error = op.error or {}
        body["error"] = {
            "code": error.get("code", "OperationFailed"),
            "message": error.get("message", f"the {op.kind} operation failed"),
        }
    headers = {"Retry-After": "1"} if op.status == operations.IN_PROGRESS else None
    return json_response(body, 200, headers)


@router.get(arm.LOCATION + "/vmSizes")
def list_vm_sizes(sub: str, location: str, ctx: Context = Depends(context)) -> Response:
    locations.get(ctx.session, location)  # 404 when there is none
    catalogue = catalogue_service.current(ctx.session)
    out = []
    for size in catalogue.list_sizes(None):
        series = catalogue.series_of(size)
        out.append(
            {
                "name": size.name,
                "family": size.family,
                "vCPUs": size.vcpus,
                "gpus": size.gpus,
                "osVhdSizeMB": 1047552,
                "maxResourceVolumeMB": size.temp_disk_gb * 1024,
                "memoryGB": size.memory_gb,
                "lowPriorityCapable": size.low_priority_capable,
                "premiumIO": size.premium_io,
                "supportedComputeTypes": sorted(arm_compute.ARM_TYPES.get(t, t) for t in series.supported_by),
            }
        )
    return json_response({"value": out})


@router.get(arm.LOCATION + "/usages")
def list_usages(sub: str, location: str, ctx: Context = Depends(context)) -> Response:
    require_pool(ctx, sub, location)
    catalogue = catalogue_service.current(ctx.session)
    base = f"/subscriptions/{sub}{arm.PROVIDER}/locations/{location}/usages"
    value = [
        {
            "id": f"{base}/{line.name}",
            "amlWorkspaceLocation": location,
            "type": f"{arm.PROVIDER[11:]}/{'vmFamily' if line.kind == 'family' else 'totalCores'}/usages",
            "unit": "Count",
            "currentValue": line.current_value,
            "limit": line.limit,
            "name": {"value": line.name, "localizedValue": line.name},
        }
        for line in quotas.usage(ctx.session, sub, location, catalogue)
    ]
    return json_response(arm.page(ctx.request, value, lambda item: item))
