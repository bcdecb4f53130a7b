"""Components through the ARM facade (azure-ai-ml's ``ml.components``, and the anonymous components
``ml.jobs.create_or_update`` registers for a pipeline's steps): a thin translation
(``api.arm.wire.arm_components``) over the native asset use cases (``services.assets.assets``, kind
``component``), so versions, ``@latest``, archive and immutability are the native rules.

- ``GET components`` containers (paged; ``listViewType``); ``GET components/{name}`` one
  (``latestVersion``, ``nextVersion``); ``PUT components/{name}`` with ``properties.isArchived``
  archives or restores every version;
- ``GET components/{name}/versions`` (paged; ``$orderBy=createdtime desc|asc``, ``$top``,
  ``listViewType``);
- ``GET/PUT/DELETE components/{name}/versions/{v}``: a PUT creates the version (the same content
  again is a no-op, so an anonymous component registers once), updates its description and tags,
  and archives or restores it when ``isArchived`` changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Body, Depends, Request, Response

from cloudlet.api.arm import WS, arm_errors, page
from cloudlet.api.arm.assets import (
    CONTAINER_BODY,
    ListView,
    Name,
    OrderBy,
    Version,
    _newest_first,
    _row,
    _workspace,
    container_routes,
    delete_version_route,
)
from cloudlet.api.arm.wire import arm_assets, arm_components
from cloudlet.api.deps import Context, context, json_response
from cloudlet.api.openapi import json_body, success
from cloudlet.api.routing import UserRoute
from cloudlet.domain.access.roles import Access
from cloudlet.services.assets import assets as asset_service
from cloudlet.services.assets import components as component_service
from cloudlet.services.core.context import WorkspaceRef

if TYPE_CHECKING:
    from cloudlet.store.schema import Asset, Workspace


router = APIRouter(tags=["arm-components"], route_class=UserRoute)
BASE = f"{WS}/components"
KIND = component_service.KIND
ARM_BODY = json_body(
    {
        "type": "object",
        "description": "an ARM component container or version as azure-ai-ml sends it (arm_components.py)",
        "required": ["properties"],
        "properties": {
            "properties": {
                "type": "object",
                "properties": {
                    "componentSpec": {
                        "type": "object",
                        "properties": {
                            "type": {"type": "string", "enum": ["command"]},
                            "name": {"type": "string"},
                            "version": {"type": "string"},
                            "command": {"type": "string"},
                            "code": {"type": "string"},
                            "environment": {"type": "string"},
                            "inputs": {"type": "object"},
                            "outputs": {"type": "object"},
                        },
                    },
                    "description": {"type": "string"},
                    "tags": {"type": "object", "additionalProperties": {"type": "string"}},
                    "properties": {"type": "object", "additionalProperties": {"type": "string"}},
                    "isArchived": {"type": "boolean"},
                    "isAnonymous": {"type": "boolean"},
                },
            }
        },
    }
)


def _view(ctx: Context, ref: WorkspaceRef, workspace: Workspace, asset: Asset) -> dict[str, Any]:
    code = component_service.code_of(asset.spec)
    code_id = (
        component_service.code_version_id(ctx.session, workspace, ref, code) if code is not None else None
    )
    return arm_components.version_view(ref.arm_id, _row(asset), code_id)


container_routes(router, KIND, BASE, CONTAINER_BODY)  # list, show, archive: as for every asset kind


@router.get(BASE + "/{name}/versions", name="arm_list_versions_component")
def list_versions(
    sub: str,
    rg: str,
    ws: str,
    name: Name,
    request: Request,
    view: ListView = None,
    order_by: OrderBy = None,
    ctx: Context = Depends(context),
) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    newest_first = _newest_first(order_by)
    rows = asset_service.list_versions(ctx.session, workspace, KIND, name, arm_assets.list_view(view))
    if not newest_first:
        rows.reverse()
    return json_response(page(request, rows, lambda a: _view(ctx, ref, workspace, a)))


@router.get(BASE + "/{name}/versions/{version}", name="arm_show_version_component")
def show_version(
    sub: str, rg: str, ws: str, name: Name, version: Version, ctx: Context = Depends(context)
) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    wanted = None if version == arm_components.DEFAULT_VERSION else version  # components.get(name)
    asset = asset_service.get_version(ctx.session, workspace, KIND, name, wanted)
    return json_response(_view(ctx, ref, workspace, asset))


@router.put(
    BASE + "/{name}/versions/{version}",
    name="arm_put_version_component",
    openapi_extra=ARM_BODY,
    responses=success(201, "Created: a new version"),
)
def put_version(
    sub: str,
    rg: str,
    ws: str,
    name: Name,
    version: Version,
    body: Any = Body(include_in_schema=False),
    ctx: Context = Depends(context),
) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
    arm = arm_components.from_arm(body, name, version)  # its errors name ARM properties
    with arm_errors(arm_components.arm_target):
        result, code_id = component_service.put_version(
            ctx.session, ref, workspace, name, version, arm.doc, arm.archived, ctx.caller, ctx.state.data
        )
    rendered = arm_components.version_view(ref.arm_id, _row(result.asset), code_id)
    return json_response(rendered, 201 if result.created else 200)


delete_version_route(router, KIND, BASE)
