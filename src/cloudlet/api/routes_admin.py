"""Native REST routes: workspaces, sizes, locations, quotas, usage and locks (identity and access:
``routes_access.py``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Response
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from cloudlet.api import arm
from cloudlet.api.deps import Context, context
from cloudlet.api.openapi import success
from cloudlet.api.routing import UserRoute
from cloudlet.domain import bounds
from cloudlet.domain.access.roles import Access
from cloudlet.domain.compute.sizes import COMPUTE_TYPES_WITH_SIZES, CustomSizeSpec
from cloudlet.domain.errors import CloudletError, forbidden, not_found
from cloudlet.domain.validation import WHOLE_FLOAT
from cloudlet.services.access import workspaces
from cloudlet.services.access.workspaces import WorkspaceUpdate
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import locations, lock_scope, quotas
from cloudlet.services.compute import locks as lock_store
from cloudlet.services.compute.locks import LockUpdate
from cloudlet.services.core.context import WorkspaceRef

WS = "/subscriptions/{sub}/resourceGroups/{rg}/workspaces/{ws}"
RG = "/subscriptions/{sub}/resourceGroups/{rg}"
router = APIRouter(prefix="/api/v1", tags=["admin"], route_class=UserRoute)
CREATED_OR_UPDATED = success(201, "Created")


def _require_admin(ctx: Context) -> None:
    if not ctx.caller.is_admin:
        raise forbidden(f"'{ctx.caller.name}' is not an administrator")


def _object(body: Any) -> dict[str, Any]:
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise CloudletError("ValidationError", "the request body must be a JSON object", "$")
    return body


# -- workspaces -------------------------------------------------------------------------------
def _base(ctx: Context) -> str:
    """Where the workspace's MLflow tracking URI points: as the ARM facade's (the TLS listener)."""
    return arm.https_base(ctx.request, ctx.state)


@router.get("/workspaces")
def list_workspaces(ctx: Context = Depends(context)) -> dict[str, Any]:
    return {
        "value": [
            workspaces.render(w, ref, _base(ctx))
            for w, ref in workspaces.list_visible(ctx.session, ctx.caller)
        ]
    }


@router.put(WS, responses=CREATED_OR_UPDATED)
def put_workspace(
    sub: str,
    rg: str,
    ws: str,
    response: Response,
    body: Annotated[WorkspaceUpdate, Body(default_factory=WorkspaceUpdate)],
    ctx: Context = Depends(context),
) -> dict[str, Any]:
    ref = WorkspaceRef(sub, rg, ws)
    workspace, created = workspaces.create_or_update(ctx.session, ref, body, ctx.caller)
    response.status_code = 201 if created else 200
    return workspaces.render(workspace, ref, _base(ctx))


@router.get(WS)
def get_workspace(sub: str, rg: str, ws: str, ctx: Context = Depends(context)) -> dict[str, Any]:
    ref = WorkspaceRef(sub, rg, ws)
    return workspaces.render(workspaces.resolve(ctx.session, ref, ctx.caller, Access.READ), ref, _base(ctx))


# -- sizes, locations, quota ------------------------------------------------------------------
@router.get("/sizes")
def list_sizes(
    compute_type: Annotated[str | None, Query(pattern=f"^({'|'.join(COMPUTE_TYPES_WITH_SIZES)})$")] = None,
    location: Annotated[str | None, Query(max_length=64)] = None,
    include_retired: bool = False,
    ctx: Context = Depends(context),
) -> dict[str, Any]:
    if location is not None:
        locations.get(ctx.session, location)  # 404 when there is none
    catalogue = catalogue_service.current(ctx.session)
    out = []
    for size in catalogue.list_sizes(compute_type, include_retired=include_retired):
        series = catalogue.series_of(size)
        out.append(
            {
                **size.to_dict(),
                "category": series.category,
                "supported_compute_types": sorted(series.supported_by),
                "retired_on": series.retired_on.isoformat() if series.retired_on else None,
            }
        )
    return {"value": out}


@router.post("/sizes", status_code=201)
def add_size(body: CustomSizeSpec, ctx: Context = Depends(context)) -> dict[str, Any]:
    return catalogue_service.add_size(ctx.session, ctx.caller, body).to_dict()


@router.get("/providers")
def list_providers(ctx: Context = Depends(context)) -> dict[str, Any]:
    """The providers a location can name, with the settings each takes (a JSON Schema)."""
    return {"value": locations.providers()}


@router.get("/locations")
def list_locations(ctx: Context = Depends(context)) -> dict[str, Any]:
    return {"value": [locations.render(row) for row in locations.list_all(ctx.session)]}


LocationName = Annotated[
    str, Path(pattern=r"^[a-z][a-z0-9-]{0,63}$", description="lower-case letters, digits, '-'")
]


class Capacity(BaseModel):
    """A location's pool (whole machines' worth of vCPUs, memory and GPUs; overcommit scales it)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    vcpus: float | None = Field(default=None, ge=0, le=bounds.MAX_LOCATION_VCPUS)
    memory_gb: float | None = Field(default=None, ge=0, le=bounds.MAX_LOCATION_MEMORY_GB)
    gpus: float | None = Field(default=None, ge=0, le=bounds.MAX_LOCATION_GPUS)
    overcommit: float | None = Field(default=None, ge=0, le=bounds.MAX_OVERCOMMIT)


class LocationUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    provider: str | None = Field(
        default=None,
        max_length=32,
        description="the provider that makes this location's nodes (a new location: local; else kept)",
    )
    config: dict[str, Any] | None = Field(
        default=None,
        description="the provider's settings, checked against its configuration (omitted: kept, or the "
        "provider's defaults when the provider changes)",
    )
    capacity: Capacity = Field(default_factory=Capacity)
    accept_host_keys: list[Annotated[str, Field(min_length=1, max_length=300)]] = Field(
        default_factory=list,
        max_length=1000,
        description="SSH locations: ADDRESS[:PORT] of hosts whose changed key to accept (the key they "
        "presented when refused; none refused: the next key presented is learned)",
    )


@router.get("/locations/{name}")
def get_location(name: LocationName, ctx: Context = Depends(context)) -> dict[str, Any]:
    return locations.view(ctx.session, locations.get(ctx.session, name))


@router.put("/locations/{name}", responses=CREATED_OR_UPDATED)
def put_location(
    name: LocationName,
    response: Response,
    body: Annotated[LocationUpdate, Body(default_factory=LocationUpdate)],
    ctx: Context = Depends(context),
) -> dict[str, Any]:
    """Add or change a location: a pool of capacity behind one provider (admin)."""
    _require_admin(ctx)
    capacity = body.capacity.model_dump(exclude_none=True)
    change = locations.LocationChange(body.provider, body.config, capacity, body.accept_host_keys or ())
    shown, created = locations.put(ctx.session, name, change, ctx.caller.name)
    response.status_code = 201 if created else 200
    return shown


@router.delete("/locations/{name}", status_code=204)
def delete_location(name: LocationName, ctx: Context = Depends(context)) -> Response:
    """Remove a location nothing is in (admin); 409 while a workspace, compute or node uses it."""
    _require_admin(ctx)
    locations.delete(ctx.session, name, ctx.caller.name)
    return Response(status_code=204)


def _pool(ctx: Context, sub: str, location: str) -> None:
    locations.get(ctx.session, location)  # 404 when there is none
    visible = {ref.subscription_id for _, ref in workspaces.list_visible(ctx.session, ctx.caller)}
    if sub not in visible and not ctx.caller.is_admin:
        raise not_found("Subscription", sub)


require_pool = _pool  # the ARM facade's usages (api/arm/computes.py) ask the same


@router.get("/subscriptions/{sub}/locations/{location}/usages")
def list_usage(sub: str, location: str, ctx: Context = Depends(context)) -> dict[str, Any]:
    _pool(ctx, sub, location)
    catalogue = catalogue_service.current(ctx.session)
    return {"value": [line.to_dict() for line in quotas.usage(ctx.session, sub, location, catalogue)]}


@router.get("/subscriptions/{sub}/locations/{location}/quotas")
def list_quotas(sub: str, location: str, ctx: Context = Depends(context)) -> dict[str, Any]:
    _pool(ctx, sub, location)
    limits = quotas.limits(ctx.session, sub, location, catalogue_service.current(ctx.session))
    rows = [
        {"name": quotas.TOTAL_DEDICATED, "limit": limits.total_dedicated, "unit": "Cores"},
        {"name": quotas.TOTAL_LOW_PRIORITY, "limit": limits.total_low_priority, "unit": "Cores"},
    ]
    rows += [{"name": f, "limit": n, "unit": "Cores"} for f, n in sorted(limits.families.items())]
    return {"value": rows}


class QuotaUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    limit: Annotated[StrictInt, Field(ge=0, le=bounds.MAX_QUOTA_CORES, description="cores"), WHOLE_FLOAT]


@router.put("/subscriptions/{sub}/locations/{location}/quotas/{name}")
def set_quota(
    sub: str, location: str, name: str, body: QuotaUpdate, ctx: Context = Depends(context)
) -> dict[str, Any]:
    _require_admin(ctx)
    _pool(ctx, sub, location)
    limit = body.limit
    catalogue = catalogue_service.current(ctx.session)
    quotas.set_quota(ctx.session, sub, location, name, limit, catalogue, ctx.caller.name)
    return {"name": name, "limit": limit, "unit": "Cores"}


# -- locks ------------------------------------------------------------------------------------
def _lock_scope(ctx: Context, sub: str, rg: str, ws: str | None, compute: str | None, write: bool) -> str:
    return lock_scope.scope_for(ctx.session, ctx.caller, WorkspaceRef(sub, rg, ws or ""), compute, write)


def _lock_routes(path: str) -> None:
    def put_lock(
        sub: str,
        rg: str,
        lock: Annotated[str, Path(json_schema_extra={"pattern": lock_store.LOCK_NAME})],
        body: LockUpdate,
        ws: str | None = None,
        name: str | None = None,
        ctx: Context = Depends(context),
    ) -> dict[str, Any]:
        scope = _lock_scope(ctx, sub, rg, ws, name, write=True)
        row = lock_store.put(ctx.session, scope, lock, body, ctx.caller.name)
        return lock_store.render_row(row)

    def list_locks(
        sub: str, rg: str, ws: str | None = None, name: str | None = None, ctx: Context = Depends(context)
    ) -> dict[str, Any]:
        scope = _lock_scope(ctx, sub, rg, ws, name, write=False)
        if ws is None:
            found = [
                lk
                for lk in lock_store.effective(ctx.session, WorkspaceRef(sub, rg, ""))
                if not lk.scope.endswith("/workspaces/")
            ]
        else:
            found = lock_store.effective(ctx.session, WorkspaceRef(sub, rg, ws), name)
        return {"value": [lock_store.render(lk) | {"inherited": lk.scope != scope} for lk in found]}

    def delete_lock(
        sub: str,
        rg: str,
        lock: str,
        ws: str | None = None,
        name: str | None = None,
        ctx: Context = Depends(context),
    ) -> Response:
        scope = _lock_scope(ctx, sub, rg, ws, name, write=True)
        lock_store.remove(ctx.session, scope, lock, ctx.caller.name)
        return Response(status_code=204)

    router.add_api_route(
        path + "/locks/{lock}", put_lock, methods=["PUT"], status_code=201, name=f"put_lock{path.count('/')}"
    )
    router.add_api_route(path + "/locks", list_locks, methods=["GET"], name=f"list_locks{path.count('/')}")
    router.add_api_route(
        path + "/locks/{lock}",
        delete_lock,
        methods=["DELETE"],
        status_code=204,
        name=f"delete_lock{path.count('/')}",
    )


for _path in (RG, WS, WS + "/computes/{name}"):
    _lock_routes(_path)


# -- the control loops -------------------------------------------------------------------------
@router.get("/system/reconcilers")
def list_reconcilers(ctx: Context = Depends(context)) -> dict[str, Any]:
    """Each control loop's finished passes and when the last one began (epoch seconds): a test or
    an operator waits for N passes after a change instead of sleeping and hoping."""
    _require_admin(ctx)
    counts = {loop.name: loop.counted() for loop in ctx.state.loops}
    return {name: {"passes": c.passes, "lastPassAt": c.last_pass_at} for name, c in counts.items()}
