"""Native REST routes for computes and operations: thin wrappers over ``cloudlet.services``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Query, Response

from cloudlet.api.deps import Context, context, json_response
from cloudlet.api.openapi import json_body, named_by_url, schema_of, success
from cloudlet.api.routing import UserRoute
from cloudlet.domain.access.roles import Access
from cloudlet.domain.compute.compute_spec import (
    AmlComputeSpec,
    ComputeInstanceSpec,
    KubernetesSpec,
    VirtualMachineSpec,
)
from cloudlet.services.access import workspaces
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import computes, operations
from cloudlet.services.compute import locks as lock_store
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.jobs import resource_monitoring
from cloudlet.services.views import computes as compute_view
from cloudlet.services.views import fair_share as fair_share_view
from cloudlet.services.views import operations as operation_view

if TYPE_CHECKING:
    from cloudlet.store.schema import Compute, Operation, Workspace


WS = "/subscriptions/{sub}/resourceGroups/{rg}/workspaces/{ws}"
router = APIRouter(prefix="/api/v1", tags=["computes"], route_class=UserRoute)
# The bodies' schemas are made with the OpenAPI document, not at import (openapi.Deferred).
COMPUTE_DOCUMENT = json_body(
    lambda: named_by_url(schema_of(AmlComputeSpec, ComputeInstanceSpec, VirtualMachineSpec, KubernetesSpec))
)


def _patch_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "the fields to change: " + ", ".join(sorted(computes.PATCHABLE_FIELDS)),
        "properties": {
            name: AmlComputeSpec.model_json_schema()["properties"][name]
            for name in sorted(computes.PATCHABLE_FIELDS)
            if name in AmlComputeSpec.model_fields
        },
        "additionalProperties": False,
    }


COMPUTE_PATCH = json_body(_patch_schema)
ACCEPTED = {"description": "Accepted: the operation runs; follow `Operation-Location`"}


def _workspace(ctx: Context, sub: str, rg: str, ws: str, needed: Access) -> tuple[WorkspaceRef, Workspace]:
    ref = WorkspaceRef(sub, rg, ws)
    return ref, workspaces.resolve(ctx.session, ref, ctx.caller, needed)


def _render(ctx: Context, ref: WorkspaceRef, compute: Compute) -> dict[str, Any]:
    return compute_view.view(ctx.session, ref, compute, ctx.state.endpoint)


def _operation_headers(ctx: Context, op: Operation) -> dict[str, str]:
    url = str(ctx.request.base_url).rstrip("/") + f"/api/v1/operations/{op.id}"
    return {"Operation-Location": url, "Azure-AsyncOperation": url, "Retry-After": "1"}


@router.get(WS + "/computes")
def list_computes(sub: str, rg: str, ws: str, ctx: Context = Depends(context)) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    scaling_locks = lock_store.effective(ctx.session, ref)
    rows = computes.list_all(ctx.session, workspace)
    catalogue = catalogue_service.current(ctx.session)
    endpoint = ctx.state.endpoint
    rendered = [compute_view.render(c, ref, scaling_locks, catalogue, endpoint) for c in rows]
    return json_response({"value": rendered})


# Every route that touches the store is a plain ``def`` (FastAPI runs it in the thread pool): a
# store call made on the event loop blocks every other request, and the loop itself, whenever the
# connection pool is empty.
@router.get(WS + "/computes/{name}")
def show_compute(sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)) -> Response:
    ref = WorkspaceRef(sub, rg, ws)
    _, compute = computes.readable(ctx.session, ref, ctx.caller, name)
    return json_response(_render(ctx, ref, compute))


@router.get(WS + "/computes/{name}/fairShare")
def compute_fair_share(sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)) -> Response:
    """The compute's pool under weighted fair share, per team: share, entitlement, cores held and
    borrowed, decayed usage, fair-share factor, queued jobs; the pool's preemptions of the hour.
    ``teams`` is empty where no team has a share of the pool (issue 31)."""
    ref = WorkspaceRef(sub, rg, ws)
    _, compute = computes.readable(ctx.session, ref, ctx.caller, name)
    shown = fair_share_view.pool_view(ctx.session, compute)
    return json_response(shown if shown is not None else {"compute": compute.name, "teams": []})


@router.put(
    WS + "/computes/{name}",
    status_code=200,
    responses=success(201, "Created: the create operation runs; follow `Operation-Location`"),
    openapi_extra=COMPUTE_DOCUMENT,
)
def create_or_update_compute(
    sub: str,
    rg: str,
    ws: str,
    name: str,
    body: dict[str, Any] = Body(include_in_schema=False),
    ctx: Context = Depends(context),
) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
    result = computes.create_or_update(
        ctx.session, ref, workspace, name, body, ctx.caller, ctx.state.endpoint
    )
    return json_response(
        result.view, 201 if result.created else 200, _operation_headers(ctx, result.operation)
    )


@router.patch(WS + "/computes/{name}", openapi_extra=COMPUTE_PATCH)
def update_compute(
    sub: str,
    rg: str,
    ws: str,
    name: str,
    body: dict[str, Any] = Body(include_in_schema=False),
    ctx: Context = Depends(context),
) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
    result = computes.patch(ctx.session, ref, workspace, name, body, ctx.caller, ctx.state.endpoint)
    return json_response(result.view, 200, _operation_headers(ctx, result.operation))


@router.delete(WS + "/computes/{name}", status_code=202, responses={202: ACCEPTED})
def delete_compute(sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
    op = computes.delete(ctx.session, ref, workspace, name, ctx.caller)
    rendered = operation_view.render(op, ref)
    return json_response(rendered, 202, _operation_headers(ctx, op))


@router.post(
    WS + "/computes/{name}/{action}",
    status_code=202,
    responses={202: ACCEPTED},
)
def compute_action(
    sub: str,
    rg: str,
    ws: str,
    name: str,
    action: Literal["start", "stop", "restart"],
    ctx: Context = Depends(context),
) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
    op = computes.act(ctx.session, ref, workspace, name, action, ctx.caller)
    rendered = operation_view.render(op, ref)
    return json_response(rendered, 202, _operation_headers(ctx, op))


@router.get("/operations/{op_id}")
def show_operation(op_id: str, ctx: Context = Depends(context)) -> Response:
    op = operations.visible(ctx.session, ctx.caller, op_id)
    headers = {"Retry-After": "1"} if op.status == operations.IN_PROGRESS else None
    ref = workspaces.ref_of_id(ctx.session, op.workspace_id)
    return json_response(operation_view.render(op, ref), 200, headers)


@router.get(WS + "/operations")
def list_operations(sub: str, rg: str, ws: str, ctx: Context = Depends(context)) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    rows = operations.recent(ctx.session, workspace.id)
    return json_response({"value": [operation_view.render(op, ref) for op in rows]})


@router.get(WS + "/usage/idle")
def idle_usage(
    sub: str,
    rg: str,
    ws: str,
    days: Annotated[int, Query(ge=1, le=366, description="the last DAYS UTC days, today included")] = 30,
    ctx: Context = Depends(context),
) -> Response:
    """Node-hours, idle node-hours, GPU-hours and idle GPU-hours per user and compute."""
    catalogue = catalogue_service.current(ctx.session)
    found = resource_monitoring.idle_usage(
        ctx.session, ctx.caller, WorkspaceRef(sub, rg, ws), days, catalogue
    )
    return json_response(found)
