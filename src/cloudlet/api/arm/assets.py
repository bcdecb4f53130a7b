"""Environments, data and models through the ARM facade (azure-ai-ml's ``ml.environments``,
``ml.data``, ``ml.models``): a thin translation (``api.arm.wire.arm_assets``) over the native asset use
cases (``services.assets.assets``), so every rule — versions immutable, ``@latest``, in-use deletes
refused, roles — is the native one. For each collection ``{c}`` (environments, data, models):

- ``GET {c}`` containers (paged; ``listViewType``); ``GET {c}/{name}`` one (``latestVersion``,
  ``nextVersion``: how the SDK picks ``@latest`` and the next version); ``PUT {c}/{name}`` with
  ``properties.isArchived``: archive or restore every version (``ml.data.archive(name)``);
- ``GET {c}/{name}/versions`` (paged; ``$orderBy=createdtime desc|asc``, ``$top``,
  ``listViewType``; ``tags`` and ``stage`` are accepted and not filtered on);
- ``GET/PUT/DELETE {c}/{name}/versions/{v}``: a PUT creates or updates the version, and archives
  or restores it when ``isArchived`` changes (``ml.data.archive(name, version)`` re-PUTs it).

Inline job environments arrive as ``PUT environments/CliV2AnonymousEnvironment/versions/<hash>``;
the job then names that version in ``environmentId``, which submission resolves as any other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Request, Response

from cloudlet.api.arm import WS, arm_errors, page
from cloudlet.api.arm.wire import arm_assets
from cloudlet.api.deps import Context, context, json_response
from cloudlet.api.openapi import deleted, json_body, success
from cloudlet.api.routing import UserRoute
from cloudlet.domain.access.roles import Access
from cloudlet.domain.assets import assets as rules
from cloudlet.domain.assets.assets import AssetKind
from cloudlet.domain.errors import validation_error
from cloudlet.services.access import workspaces
from cloudlet.services.assets import asset_writes, build_contexts
from cloudlet.services.assets import assets as asset_service
from cloudlet.services.core.context import WorkspaceRef

if TYPE_CHECKING:
    from cloudlet.store.schema import Asset, Workspace


router = APIRouter(tags=["arm-assets"], route_class=UserRoute)
Name = Annotated[str, Path(pattern=rules.NAME_PATTERN.pattern, max_length=255, description=rules.NAME_RULE)]
Version = Annotated[
    str, Path(pattern=rules.VERSION_PATTERN.pattern, max_length=64, description=rules.VERSION_RULE)
]
# The values the SDK sends, as enums (the server also takes other spellings of them).
ListView = Annotated[
    str | None,
    Query(
        alias="listViewType", max_length=32, json_schema_extra={"enum": ["ActiveOnly", "ArchivedOnly", "All"]}
    ),
]
OrderBy = Annotated[
    str | None,
    Query(
        alias="$orderBy",
        max_length=64,
        json_schema_extra={"enum": ["createdtime desc", "createdtime asc", "createdtime"]},
    ),
]
Informational = Annotated[str | None, Query(max_length=1024)]
ARM_BODY = json_body(
    {
        "type": "object",
        "description": "an ARM asset container or version, as azure-ai-ml sends it (api/arm/wire/)",
        "required": ["properties"],
        "properties": {
            "properties": {
                "type": "object",
                "properties": {
                    "description": {"type": "string"},
                    "tags": {"type": "object", "additionalProperties": {"type": "string"}},
                    "properties": {"type": "object", "additionalProperties": {"type": "string"}},
                    "isArchived": {"type": "boolean"},
                    "isAnonymous": {"type": "boolean"},
                    "dataType": {"type": "string"},
                    "dataUri": {"type": "string"},
                    "modelType": {"type": "string"},
                    "modelUri": {"type": "string"},
                    "image": {"type": "string"},
                    "condaFile": {"type": "string"},
                },
            }
        },
    }
)
# A container PUT archives or restores its versions: it reads properties.isArchived only.
CONTAINER_BODY = json_body(
    {
        "type": "object",
        "description": "an ARM asset container: properties.isArchived archives or restores its versions",
        "required": ["properties"],
        "properties": {
            "properties": {
                "type": "object",
                "required": ["isArchived"],
                "properties": {"isArchived": {"type": "boolean"}},
            }
        },
    }
)


def _workspace(ctx: Context, sub: str, rg: str, ws: str, needed: Access) -> tuple[WorkspaceRef, Workspace]:
    ref = WorkspaceRef(sub, rg, ws)
    return ref, workspaces.resolve(ctx.session, ref, ctx.caller, needed)


def _row(asset: Asset) -> arm_assets.VersionRow:
    return arm_assets.VersionRow(
        asset.name,
        asset.version,
        asset.spec,
        asset.archived,
        asset.created_by,
        asset.created_at,
        asset.modified_at,
    )


def _container(container: asset_service.Container) -> arm_assets.ContainerRow:
    return arm_assets.ContainerRow(
        container.name, _row(container.latest), container.next_version, container.archived
    )


def _archived_flag(body: Any) -> bool:
    props = body.get("properties") if isinstance(body, dict) else None
    flag = props.get("isArchived") if isinstance(props, dict) else None
    if not isinstance(flag, bool):
        raise validation_error(
            "properties.isArchived",
            "a container PUT archives or restores its versions: send properties.isArchived true or false",
        )
    return flag


def _newest_first(order_by: str | None) -> bool:
    if order_by is None:
        return True
    words = order_by.lower().split()
    if len(words) in (1, 2) and words[0] == "createdtime" and words[1:] in ([], ["desc"], ["asc"]):
        return words[1:] != ["asc"]
    raise validation_error("$orderBy", f"$orderBy {order_by!r}: only 'createdtime desc' or 'createdtime asc'")


def container_routes(target: APIRouter, kind: AssetKind, base: str, body: dict[str, Any]) -> None:
    """Register one collection's container routes on TARGET (the functions named per kind: their
    OpenAPI ids differ); components (``api/arm/components.py``) share them. BODY: the OpenAPI
    body of the archive PUT."""

    def add(method: str, path: str, name: str, **kwargs: Any) -> Callable[[Callable[..., Any]], Any]:
        return target.api_route(base + path, methods=[method], name=f"arm_{name}_{kind}", **kwargs)

    @add("GET", "", "list_containers")
    def list_containers(
        sub: str,
        rg: str,
        ws: str,
        request: Request,
        view: ListView = None,
        ctx: Context = Depends(context),
    ) -> Response:
        ref, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
        rows = asset_service.containers(ctx.session, workspace, kind, arm_assets.list_view(view))
        return json_response(
            page(request, rows, lambda c: arm_assets.container_view(kind, ref.arm_id, _container(c)))
        )

    @add("GET", "/{name}", "show_container")
    def show_container(sub: str, rg: str, ws: str, name: Name, ctx: Context = Depends(context)) -> Response:
        ref, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
        [found] = asset_service.containers(ctx.session, workspace, kind, "all", name)
        return json_response(arm_assets.container_view(kind, ref.arm_id, _container(found)))

    @add("PUT", "/{name}", "archive_container", openapi_extra=body)
    def archive_container(
        sub: str,
        rg: str,
        ws: str,
        name: Name,
        body: Any = Body(include_in_schema=False),
        ctx: Context = Depends(context),
    ) -> Response:
        ref, workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
        archived = _archived_flag(body)
        found = asset_service.archive_container(ctx.session, ref, workspace, kind, name, archived, ctx.caller)
        return json_response(arm_assets.container_view(kind, ref.arm_id, _container(found)))


def delete_version_route(target: APIRouter, kind: AssetKind, base: str) -> None:
    """``DELETE {base}/{name}/versions/{version}`` on TARGET, shared with components."""

    @target.delete(base + "/{name}/versions/{version}", name=f"arm_delete_version_{kind}", **deleted())
    def delete_version(
        sub: str, rg: str, ws: str, name: Name, version: Version, ctx: Context = Depends(context)
    ) -> Response:
        ref, workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
        asset_service.delete_version(ctx.session, ref, workspace, kind, name, version, ctx.caller)
        return Response(status_code=200)


def _routes(kind: AssetKind) -> None:
    """Register one collection's routes (functions named per kind: their OpenAPI ids differ)."""
    collection = rules.COLLECTIONS[kind]
    base = f"{WS}/{collection}"
    container_routes(router, kind, base, CONTAINER_BODY)

    def add(method: str, path: str, name: str, **kwargs: Any) -> Callable[[Callable[..., Any]], Any]:
        return router.api_route(base + path, methods=[method], name=f"arm_{name}_{kind}", **kwargs)

    def rename(target: str | None) -> str | None:
        return arm_assets.arm_target(kind, target)

    @add("GET", "/{name}/versions", "list_versions")
    def list_versions(
        sub: str,
        rg: str,
        ws: str,
        name: Name,
        request: Request,
        view: ListView = None,
        order_by: OrderBy = None,
        tags: Informational = None,
        stage: Informational = None,
        ctx: Context = Depends(context),
    ) -> Response:
        ref, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
        newest_first = _newest_first(order_by)
        rows = asset_service.list_versions(ctx.session, workspace, kind, name, arm_assets.list_view(view))
        if not newest_first:
            rows.reverse()
        return json_response(
            page(request, rows, lambda a: arm_assets.version_view(kind, ref.arm_id, _row(a)))
        )

    @add("GET", "/{name}/versions/{version}", "show_version")
    def show_version(
        sub: str, rg: str, ws: str, name: Name, version: Version, ctx: Context = Depends(context)
    ) -> Response:
        ref, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
        asset = asset_service.get_version(ctx.session, workspace, kind, name, version)
        return json_response(arm_assets.version_view(kind, ref.arm_id, _row(asset)))

    @add(
        "PUT",
        "/{name}/versions/{version}",
        "put_version",
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
        arm = arm_assets.from_arm(kind, body, ref.workspace)  # its errors name ARM properties
        doc = arm.doc
        with arm_errors(rename):
            if kind == "environment" and doc.get("build") is not None:  # the SDK's uploaded context
                doc = build_contexts.inline(doc, ctx.state.data, workspace.id)
            result = asset_writes.write(
                ctx.session,
                ref,
                workspace,
                kind,
                name,
                version,
                doc,
                ctx.caller,
                ctx.state.data,
                arm.archived,
            )
        rendered = arm_assets.version_view(kind, ref.arm_id, _row(result.asset))
        return json_response(rendered, 201 if result.created else 200)

    delete_version_route(router, kind, base)


for _kind in arm_assets.KINDS:  # components: api/arm/components.py
    _routes(_kind)
