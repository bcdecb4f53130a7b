"""Native REST routes for data, model and environment assets: thin wrappers over ``services/assets/assets``.

The same routes for each kind, under ``{ws}/data``, ``{ws}/models`` and ``{ws}/environments``:

- ``GET {c}`` each name's latest version; ``GET {c}/{name}`` the latest version of one name;
- ``GET {c}/{name}/versions`` (``list_view_type``: active_only, archived_only, all);
- ``POST {c}/{name}/versions`` creates the next version; ``PUT {c}/{name}/versions/{v}`` creates
  or updates that one; ``GET`` shows it; ``DELETE`` deletes it (409 while a job uses it);
- ``POST {c}/{name}/archive|restore`` and ``POST {c}/{name}/versions/{v}/archive|restore``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import UTC, datetime
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Path, Query, Response

from cloudlet.api.deps import Context, context, json_response
from cloudlet.api.openapi import json_body, schema_of, success
from cloudlet.api.routing import UserRoute
from cloudlet.domain.access.roles import Access
from cloudlet.domain.assets import assets as rules
from cloudlet.domain.assets.assets import AssetKind
from cloudlet.services.access import workspaces
from cloudlet.services.assets import asset_writes
from cloudlet.services.assets import assets as asset_service
from cloudlet.services.core.context import WorkspaceRef

if TYPE_CHECKING:
    from cloudlet.store.schema import Asset, Workspace


WS = "/subscriptions/{sub}/resourceGroups/{rg}/workspaces/{ws}"
router = APIRouter(prefix="/api/v1", tags=["assets"], route_class=UserRoute)
Name = Annotated[str, Path(pattern=rules.NAME_PATTERN.pattern, max_length=255, description=rules.NAME_RULE)]
Version = Annotated[
    str, Path(pattern=rules.VERSION_PATTERN.pattern, max_length=64, description=rules.VERSION_RULE)
]
Action = Literal["archive", "restore"]
ViewType = Literal["active_only", "archived_only", "all"]


def _workspace(ctx: Context, sub: str, rg: str, ws: str, needed: Access) -> tuple[WorkspaceRef, Workspace]:
    ref = WorkspaceRef(sub, rg, ws)
    return ref, workspaces.resolve(ctx.session, ref, ctx.caller, needed)


def _when(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, UTC).isoformat()


def render(asset: Asset, ref: WorkspaceRef) -> dict[str, Any]:
    """An asset version in the CLI v2 YAML shape, with its id and creation context."""
    collection = rules.COLLECTIONS[asset.kind]  # type: ignore[index]
    return {
        "id": f"{ref.arm_id}/{collection}/{asset.name}/versions/{asset.version}",
        "name": asset.name,
        "version": asset.version,
        **asset.spec,
        "is_archived": asset.archived,
        "creation_context": {
            "created_at": _when(asset.created_at),
            "created_by": asset.created_by,
            "last_modified_at": _when(asset.modified_at),
        },
    }


def _routes(kind: AssetKind) -> None:
    """Register the routes of one kind (functions named per kind: their OpenAPI ids differ)."""
    base = f"{WS}/{rules.COLLECTIONS[kind]}"
    document = json_body(functools.partial(schema_of, rules.SPEC_MODELS[kind]))  # with the document
    tags: list[str | Enum] = [f"{kind} assets"]

    def add(method: str, path: str, name: str, **kwargs: Any) -> Callable[[Callable[..., Any]], Any]:
        return router.api_route(base + path, methods=[method], name=f"{name}_{kind}", tags=tags, **kwargs)

    @add("GET", "", "list_assets")
    def list_assets(
        sub: str, rg: str, ws: str, include_archived: bool = False, ctx: Context = Depends(context)
    ) -> Response:
        ref, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
        rows = asset_service.list_assets(ctx.session, workspace, kind, include_archived)
        return json_response({"value": [render(r, ref) for r in rows]})

    @add("GET", "/{name}", "show_latest")
    def show_latest(sub: str, rg: str, ws: str, name: Name, ctx: Context = Depends(context)) -> Response:
        ref, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
        return json_response(render(asset_service.get_version(ctx.session, workspace, kind, name, None), ref))

    @add("GET", "/{name}/versions", "list_versions")
    def list_versions(
        sub: str,
        rg: str,
        ws: str,
        name: Name,
        list_view_type: Annotated[ViewType, Query()] = "active_only",
        ctx: Context = Depends(context),
    ) -> Response:
        ref, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
        rows = asset_service.list_versions(ctx.session, workspace, kind, name, list_view_type)
        return json_response({"value": [render(r, ref) for r in rows]})

    @add("GET", "/{name}/versions/{version}", "show_version")
    def show_version(
        sub: str, rg: str, ws: str, name: Name, version: Version, ctx: Context = Depends(context)
    ) -> Response:
        ref, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
        return json_response(
            render(asset_service.get_version(ctx.session, workspace, kind, name, version), ref)
        )

    def _write(
        ctx: Context, sub: str, rg: str, ws: str, name: str, version: str | None, body: Any
    ) -> Response:
        ref, workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
        result = asset_writes.write(
            ctx.session, ref, workspace, kind, name, version, body, ctx.caller, ctx.state.data
        )
        return json_response(render(result.asset, ref), 201 if result.created else 200)

    @add("POST", "/{name}/versions", "create_next_version", status_code=201, openapi_extra=document)
    def create_next_version(
        sub: str,
        rg: str,
        ws: str,
        name: Name,
        body: dict[str, Any] = Body(include_in_schema=False),
        ctx: Context = Depends(context),
    ) -> Response:
        return _write(ctx, sub, rg, ws, name, None, body)

    @add(
        "PUT",
        "/{name}/versions/{version}",
        "create_or_update_version",
        status_code=200,
        responses=success(201, "Created"),
        openapi_extra=document,
    )
    def create_or_update_version(
        sub: str,
        rg: str,
        ws: str,
        name: Name,
        version: Version,
        body: dict[str, Any] = Body(include_in_schema=False),
        ctx: Context = Depends(context),
    ) -> Response:
        return _write(ctx, sub, rg, ws, name, version, body)

    @add("DELETE", "/{name}/versions/{version}", "delete_version", status_code=204)
    def delete_version(
        sub: str, rg: str, ws: str, name: Name, version: Version, ctx: Context = Depends(context)
    ) -> Response:
        ref, workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
        asset_service.delete_version(ctx.session, ref, workspace, kind, name, version, ctx.caller)
        return Response(status_code=204)

    def _archive(
        ctx: Context, sub: str, rg: str, ws: str, name: str, version: str | None, action: Action
    ) -> Response:
        ref, workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
        rows = asset_service.archive(
            ctx.session, ref, workspace, kind, name, version, action == "archive", ctx.caller
        )
        return json_response({"value": [render(r, ref) for r in rows]})

    @add("POST", "/{name}/versions/{version}/{action}", "archive_version")
    def archive_version(
        sub: str,
        rg: str,
        ws: str,
        name: Name,
        version: Version,
        action: Action,
        ctx: Context = Depends(context),
    ) -> Response:
        return _archive(ctx, sub, rg, ws, name, version, action)

    @add("POST", "/{name}/{action}", "archive_all")
    def archive_all(
        sub: str, rg: str, ws: str, name: Name, action: Action, ctx: Context = Depends(context)
    ) -> Response:
        return _archive(ctx, sub, rg, ws, name, None, action)


for _kind in rules.KINDS:
    _routes(_kind)
