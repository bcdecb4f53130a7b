"""Native REST routes for batch endpoints and deployments: thin wrappers over
``services/endpoints/batch_endpoints``.

- ``GET {ws}/batchEndpoints``; ``PUT|GET|DELETE {ws}/batchEndpoints/{e}``;
- ``GET {ws}/batchEndpoints/{e}/deployments``; ``PUT|GET|DELETE …/deployments/{d}``
  (``PUT …?set_default=true`` makes it the endpoint's default);
- ``POST {ws}/batchEndpoints/{e}/invoke`` submits a ``batch_scoring`` job (201, the job);
- ``GET {ws}/batchEndpoints/{e}/jobs`` the endpoint's invocations, newest first.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Response

from cloudlet.api.deps import Context, context, json_response
from cloudlet.api.openapi import json_body, schema_of, success
from cloudlet.api.routing import UserRoute
from cloudlet.domain.access.roles import Access
from cloudlet.domain.endpoints import batch_endpoints as rules
from cloudlet.services.access import workspaces
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.endpoints import batch_endpoints as service
from cloudlet.services.views import jobs as native_jobs

if TYPE_CHECKING:
    from cloudlet.store.schema import Workspace


WS = "/subscriptions/{sub}/resourceGroups/{rg}/workspaces/{ws}"
EP = WS + "/batchEndpoints/{endpoint}"
router = APIRouter(prefix="/api/v1", tags=["batch endpoints"], route_class=UserRoute)
Name = Annotated[str, Path(pattern=rules.NAME_PATTERN.pattern, max_length=32, description=rules.NAME_RULE)]
# The bodies' schemas are made with the OpenAPI document, not at import (openapi.Deferred).
ENDPOINT_DOCUMENT = json_body(functools.partial(schema_of, rules.BatchEndpointSpec))
DEPLOYMENT_DOCUMENT = json_body(functools.partial(schema_of, rules.BatchDeploymentSpec))
INVOKE_DOCUMENT = json_body(functools.partial(schema_of, rules.InvokeRequest))


def _workspace(ctx: Context, sub: str, rg: str, ws: str, needed: Access) -> tuple[WorkspaceRef, Workspace]:
    ref = WorkspaceRef(sub, rg, ws)
    return ref, workspaces.resolve(ctx.session, ref, ctx.caller, needed)


def _base(ctx: Context) -> str:
    return str(ctx.request.base_url).rstrip("/")


def _invoke_base(ctx: Context) -> str:
    """Where this door serves an endpoint's ``…/invoke`` (the view's scoring URI)."""
    return _base(ctx) + "/api/v1"


# -- endpoints -------------------------------------------------------------------------------
@router.get(WS + "/batchEndpoints")
def list_batch_endpoints(sub: str, rg: str, ws: str, ctx: Context = Depends(context)) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    rows = service.list_endpoints(ctx.session, workspace)
    return json_response({"value": [service.render_endpoint(r, ref, _invoke_base(ctx)) for r in rows]})


@router.get(EP)
def show_batch_endpoint(
    sub: str, rg: str, ws: str, endpoint: Name, ctx: Context = Depends(context)
) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    return json_response(
        service.render_endpoint(
            service.get_endpoint(ctx.session, workspace, endpoint), ref, _invoke_base(ctx)
        )
    )


@router.put(EP, status_code=200, responses=success(201, "Created"), openapi_extra=ENDPOINT_DOCUMENT)
def put_batch_endpoint(
    sub: str,
    rg: str,
    ws: str,
    endpoint: Name,
    body: dict[str, Any] = Body(include_in_schema=False),
    ctx: Context = Depends(context),
) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
    row, created = service.create_or_update_endpoint(ctx.session, ref, workspace, endpoint, body, ctx.caller)
    return json_response(service.render_endpoint(row, ref, _invoke_base(ctx)), 201 if created else 200)


@router.delete(EP, status_code=204)
def delete_batch_endpoint(
    sub: str, rg: str, ws: str, endpoint: Name, ctx: Context = Depends(context)
) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
    service.delete_endpoint(ctx.session, ref, workspace, endpoint, ctx.caller)
    return Response(status_code=204)


# -- deployments -----------------------------------------------------------------------------
@router.get(EP + "/deployments")
def list_batch_deployments(
    sub: str, rg: str, ws: str, endpoint: Name, ctx: Context = Depends(context)
) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    row = service.get_endpoint(ctx.session, workspace, endpoint)
    return json_response(
        {
            "value": [
                service.render_deployment(d, row.name, ref) for d in service.deployments(ctx.session, row)
            ]
        }
    )


@router.get(EP + "/deployments/{deployment}")
def show_batch_deployment(
    sub: str, rg: str, ws: str, endpoint: Name, deployment: Name, ctx: Context = Depends(context)
) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    row = service.get_endpoint(ctx.session, workspace, endpoint)
    return json_response(
        service.render_deployment(service.get_deployment(ctx.session, row, deployment), row.name, ref)
    )


@router.put(
    EP + "/deployments/{deployment}",
    status_code=200,
    responses=success(201, "Created"),
    openapi_extra=DEPLOYMENT_DOCUMENT,
)
def put_batch_deployment(
    sub: str,
    rg: str,
    ws: str,
    endpoint: Name,
    deployment: Name,
    set_default: Annotated[bool, Query(description="make it the endpoint's default deployment")] = False,
    body: dict[str, Any] = Body(include_in_schema=False),
    ctx: Context = Depends(context),
) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
    row, parent, created = service.create_or_update_deployment(
        ctx.session, ref, workspace, endpoint, deployment, body, ctx.caller, ctx.state.data, set_default
    )
    return json_response(service.render_deployment(row, parent.name, ref), 201 if created else 200)


@router.delete(EP + "/deployments/{deployment}", status_code=204)
def delete_batch_deployment(
    sub: str, rg: str, ws: str, endpoint: Name, deployment: Name, ctx: Context = Depends(context)
) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
    service.delete_deployment(ctx.session, ref, workspace, endpoint, deployment, ctx.caller)
    return Response(status_code=204)


# -- invocations -----------------------------------------------------------------------------
@router.post(EP + "/invoke", status_code=201, openapi_extra=INVOKE_DOCUMENT)
def invoke_batch_endpoint(
    sub: str,
    rg: str,
    ws: str,
    endpoint: Name,
    body: dict[str, Any] = Body(include_in_schema=False),
    ctx: Context = Depends(context),
) -> Response:
    request = rules.parse_invoke(body)
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
    job = service.invoke(ctx.session, workspace, endpoint, request, ctx.caller, ctx.state.data)
    return json_response(native_jobs.render(job, ref, [], _base(ctx), ctx.state.endpoint), 201)


@router.get(EP + "/jobs")
def list_batch_endpoint_jobs(
    sub: str, rg: str, ws: str, endpoint: Name, ctx: Context = Depends(context)
) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    jobs = service.invocations(ctx.session, workspace, endpoint)
    return json_response(
        {"value": [native_jobs.render(job, ref, [], _base(ctx), ctx.state.endpoint) for job in jobs]}
    )
