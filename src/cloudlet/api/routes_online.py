"""Native REST routes for online endpoints and deployments: thin wrappers over
``services/endpoints/online_endpoints``; the replicas are the runtime's (``control/online_replicas``), told
after each commit. The scoring path itself is the gateway's (``api/online_gateway.py``).

Under ``{ws}/onlineEndpoints``: ``GET`` (list), ``PUT|GET|DELETE /{e}``, ``POST /{e}/listKeys``,
``POST /{e}/token``, ``POST /{e}/regenerateKeys``; ``GET /{e}/deployments``,
``PUT|GET|DELETE /{e}/deployments/{d}`` (``?local=true``: a local deployment for debugging),
``POST /{e}/deployments/{d}/getLogs``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Response

from cloudlet.api.deps import Context, context, json_response
from cloudlet.api.openapi import json_body, nullable, success
from cloudlet.api.routing import UserRoute
from cloudlet.domain.access.roles import Access
from cloudlet.domain.endpoints import online_endpoints as rules
from cloudlet.services.access import workspaces
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.endpoints import online_endpoints as service
from cloudlet.services.endpoints import online_writes as writes

if TYPE_CHECKING:
    from cloudlet.store.schema import OnlineEndpoint, Workspace


WS = "/subscriptions/{sub}/resourceGroups/{rg}/workspaces/{ws}"
BASE = WS + "/onlineEndpoints"
router = APIRouter(prefix="/api/v1", tags=["online endpoints"], route_class=UserRoute)
Name = Annotated[
    str, Path(pattern=rules.ENDPOINT_NAME.pattern, max_length=32, description=rules.ENDPOINT_NAME_RULE)
]

_WEIGHTS = {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 100}}
_TAGS = {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}}
ENDPOINT_SCHEMA = {
    "type": "object",
    "description": "a managedOnlineEndpoint document (CLI v2 YAML as JSON)",
    # Every field may be null: the document is YAML's, where null is the default.
    "properties": nullable(
        {
            "name": {"type": "string", "description": "the URL's name when given"},
            "auth_mode": {"type": "string", "enum": list(rules.AUTH_MODES)},
            "description": {"type": "string"},
            "tags": _TAGS,
            "traffic": _WEIGHTS,
            "mirror_traffic": _WEIGHTS,
        }
    ),
    "additionalProperties": False,
}
_INT = {"type": "integer", "minimum": 0}
_PROBE = {
    "type": "object",
    "properties": {k: _INT for k in rules.PROBE_DEFAULTS},
    "additionalProperties": False,
}
DEPLOYMENT_SCHEMA = {
    "type": "object",
    "description": "a managedOnlineDeployment document (CLI v2 YAML as JSON, local paths uploaded)",
    "properties": {
        "name": {"type": "string"},
        "endpoint_name": {"type": "string"},
        "model": {
            "description": "azureml:<name>:<version>, an uploaded datastore path, codes/<sha256>, or "
            "{path, type, name, version}",
            "anyOf": [{"type": "string"}, {"type": "object"}],
        },
        "model_type": {"type": "string", "enum": list(rules.MODEL_TYPES)},
        "code_configuration": {
            "type": "object",
            "properties": {"code": {"type": "string"}, "scoring_script": {"type": "string"}},
            "required": ["code", "scoring_script"],
        },
        "environment": {
            "description": "a name, or inline: {image, conda_file, pip} (built on the replica's node)",
            "anyOf": [{"type": "string"}, {"type": "object"}],
        },
        "environment_variables": _TAGS,
        "compute": {"type": "string", "description": "azureml:<compute instance>: run the replicas there"},
        "instance_type": {"type": "string"},
        "instance_count": {"type": "integer", "minimum": 1, "maximum": rules.MAX_INSTANCES},
        "request_settings": {
            "type": "object",
            "properties": {k: _INT for k in rules.REQUEST_DEFAULTS},
            "additionalProperties": False,
        },
        "liveness_probe": _PROBE,
        "readiness_probe": _PROBE,
        "description": {"type": "string"},
        "tags": _TAGS,
    },
    # code_configuration may be left out for an MLflow model (a no-code deployment)
    "required": ["model", "instance_type"],
}
KEYS_SCHEMA = {
    "type": "object",
    "properties": {"keyType": {"type": "string", "enum": ["Primary", "Secondary"]}},
    "required": ["keyType"],
}
LOGS_SCHEMA = {"anyOf": [rules.LOGS_SCHEMA, {"type": "null"}]}  # null: as no body


def _workspace(ctx: Context, sub: str, rg: str, ws: str, needed: Access) -> tuple[WorkspaceRef, Workspace]:
    ref = WorkspaceRef(sub, rg, ws)
    return ref, workspaces.resolve(ctx.session, ref, ctx.caller, needed)


def _endpoint(
    ctx: Context, sub: str, rg: str, ws: str, name: str, needed: Access
) -> tuple[WorkspaceRef, Workspace, OnlineEndpoint]:
    ref, workspace = _workspace(ctx, sub, rg, ws, needed)
    return ref, workspace, service.get_endpoint(ctx.session, workspace, name)


def _render(ctx: Context, row: OnlineEndpoint, ref: WorkspaceRef) -> dict[str, Any]:
    return service.render_endpoint(row, ref, ctx.state.endpoint)


@router.get(BASE)
def list_online_endpoints(sub: str, rg: str, ws: str, ctx: Context = Depends(context)) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    rows = service.list_endpoints(ctx.session, workspace)
    return json_response({"value": [_render(ctx, r, ref) for r in rows]})


@router.put(BASE + "/{name}", responses=success(201, "Created"), openapi_extra=json_body(ENDPOINT_SCHEMA))
def put_online_endpoint(
    sub: str,
    rg: str,
    ws: str,
    name: Name,
    body: Any = Body(include_in_schema=False),
    ctx: Context = Depends(context),
) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
    written = writes.put_endpoint(ctx.session, ref, workspace, name, body, ctx.caller.name)
    return json_response(_render(ctx, written.row, ref), 201 if written.created else 200)


@router.get(BASE + "/{name}")
def show_online_endpoint(sub: str, rg: str, ws: str, name: Name, ctx: Context = Depends(context)) -> Response:
    ref, _, row = _endpoint(ctx, sub, rg, ws, name, Access.READ)
    return json_response(_render(ctx, row, ref))


@router.delete(BASE + "/{name}", status_code=204)
def delete_online_endpoint(
    sub: str, rg: str, ws: str, name: Name, ctx: Context = Depends(context)
) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
    writes.delete_endpoint(ctx.session, ref, workspace, name, ctx.caller.name)
    return Response(status_code=204)


@router.post(BASE + "/{name}/listKeys")
def list_online_endpoint_keys(
    sub: str, rg: str, ws: str, name: Name, ctx: Context = Depends(context)
) -> Response:
    _, _, row = _endpoint(ctx, sub, rg, ws, name, Access.WRITE)
    return json_response(service.keys(row))


@router.post(BASE + "/{name}/token")
def online_endpoint_token(
    sub: str, rg: str, ws: str, name: Name, ctx: Context = Depends(context)
) -> Response:
    _, _, row = _endpoint(ctx, sub, rg, ws, name, Access.WRITE)
    return json_response(service.token(ctx.state.token_secret, row))


@router.post(BASE + "/{name}/regenerateKeys", status_code=200, openapi_extra=json_body(KEYS_SCHEMA))
def regenerate_online_endpoint_keys(
    sub: str,
    rg: str,
    ws: str,
    name: Name,
    body: Any = Body(include_in_schema=False),
    ctx: Context = Depends(context),
) -> Response:
    ref, _, row = _endpoint(ctx, sub, rg, ws, name, Access.WRITE)
    key_type = body.get("keyType") if isinstance(body, dict) else None
    writes.regenerate(ctx.session, ref, row, str(key_type or ""), ctx.caller.name)
    return json_response({"keyType": str(key_type).capitalize()})


@router.get(BASE + "/{name}/deployments")
def list_online_deployments(
    sub: str, rg: str, ws: str, name: Name, ctx: Context = Depends(context)
) -> Response:
    ref, workspace, row = _endpoint(ctx, sub, rg, ws, name, Access.READ)
    runtime = ctx.state.online
    value = [
        service.render_deployment(d, ref, name, runtime.live(ctx.session, workspace.id, name, d.name))
        for d in service.deployments_of(ctx.session, row)
    ]
    return json_response({"value": value})


@router.put(
    BASE + "/{name}/deployments/{deployment}",
    responses=success(201, "Created"),
    openapi_extra=json_body(DEPLOYMENT_SCHEMA),
)
def put_online_deployment(
    sub: str,
    rg: str,
    ws: str,
    name: Name,
    deployment: Name,
    local: Annotated[bool, Query(description="run the replicas on this machine, for debugging")] = False,
    body: Any = Body(include_in_schema=False),
    ctx: Context = Depends(context),
) -> Response:
    ref, workspace, row = _endpoint(ctx, sub, rg, ws, name, Access.WRITE)
    written = writes.put_deployment(
        ctx.session,
        ref,
        workspace,
        row,
        deployment,
        body,
        ctx.caller.name,
        local,
        data=ctx.state.data,
        live=lambda session: ctx.state.online.live(session, workspace.id, name, deployment),
    )
    rendered = service.render_deployment(written.row, ref, name, written.live)
    return json_response(rendered, 201 if written.created else 200)


@router.get(BASE + "/{name}/deployments/{deployment}")
def show_online_deployment(
    sub: str, rg: str, ws: str, name: Name, deployment: Name, ctx: Context = Depends(context)
) -> Response:
    ref, workspace, row = _endpoint(ctx, sub, rg, ws, name, Access.READ)
    found = service.get_deployment(ctx.session, row, deployment)
    live = {
        **ctx.state.online.live(ctx.session, workspace.id, name, deployment),
        "nodes": service.nodes_of(ctx.session, found),
    }
    return json_response(service.render_deployment(found, ref, name, live))


@router.delete(BASE + "/{name}/deployments/{deployment}", status_code=204)
def delete_online_deployment(
    sub: str, rg: str, ws: str, name: Name, deployment: Name, ctx: Context = Depends(context)
) -> Response:
    ref, _, row = _endpoint(ctx, sub, rg, ws, name, Access.WRITE)
    writes.delete_deployment(ctx.session, ref, row, deployment, ctx.caller.name)
    return Response(status_code=204)


@router.post(
    BASE + "/{name}/deployments/{deployment}/getLogs", openapi_extra=json_body(LOGS_SCHEMA, required=False)
)
def online_deployment_logs(
    sub: str,
    rg: str,
    ws: str,
    name: Name,
    deployment: Name,
    body: Any = Body(default=None, include_in_schema=False),
    ctx: Context = Depends(context),
) -> Response:
    _, workspace, row = _endpoint(ctx, sub, rg, ws, name, Access.READ)
    service.get_deployment(ctx.session, row, deployment)
    count = rules.log_lines(body)
    return json_response({"content": ctx.state.online.logs(workspace.id, name, deployment, count)})
