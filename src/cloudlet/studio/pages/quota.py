"""Quota: per location × VM family, the cores used against the limit (as bars) and who holds them,
from ``quotas.quota_page`` (the same ``quotas.usage`` the REST usages route returns); an
administrator raises a limit here (``quotas.set_quota``, the REST admin route's service)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from cloudlet.api.deps import Context, context
from cloudlet.domain.errors import CloudletError, forbidden
from cloudlet.services.access import workspaces
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import locations, quotas
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.studio import shell
from cloudlet.studio.session import PREFIX, StudioRoute, posted

router = APIRouter(prefix=PREFIX, route_class=StudioRoute, include_in_schema=False)
NAV = shell.NavItem("quota", "Quota", "quota", "quota")
WS = "/ws/{sub}/{rg}/{ws}/quota"


def _places(ctx: Context, ref: WorkspaceRef, ws: Any) -> list[str]:
    """The subscription's pools the caller may see: every location for an administrator, else the
    locations of the workspaces they see in this subscription."""
    if ctx.caller.is_admin:
        return [row.name for row in locations.list_all(ctx.session)]
    visible = workspaces.list_visible(ctx.session, ctx.caller)
    mine = {w.location for w, r in visible if r.subscription_id == ref.subscription_id}
    return sorted(mine | {ws.location})


def lines(ctx: Context, ref: WorkspaceRef, ws: Any) -> list[dict[str, Any]]:
    """Each location's totals and the families with a limit or a holder, with who holds the cores
    (``quotas.quota_page``: the numbers the REST usages report)."""
    catalogue = catalogue_service.current(ctx.session)
    return quotas.quota_page(ctx.session, ref.subscription_id, _places(ctx, ref, ws), catalogue)


def _page(
    ctx: Context, ref: WorkspaceRef, ws: Any, errors: dict[str, str], status: int = 200
) -> HTMLResponse:
    return shell.render(
        ctx, "quota.html", ref, ws, active=NAV.key, status=status, rows=lines(ctx, ref, ws), errors=errors
    )


@router.get(WS)
def quota_page(sub: str, rg: str, ws: str, ctx: Context = Depends(context)) -> HTMLResponse:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    return _page(ctx, ref, workspace, {})


def _raise(ctx: Context, sub: str, rg: str, ws: str, form: dict[str, str]) -> Response:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    if not ctx.caller.is_admin:
        raise forbidden("only an administrator may change a quota")
    place, name = form.get("location", ""), form.get("name", "")
    key = f"{place}/{name}"
    if place not in _places(ctx, ref, workspace):
        return _page(ctx, ref, workspace, {key: f"location '{place}' does not exist"}, 400)
    try:
        limit = int(form.get("limit", "").strip())
        catalogue = catalogue_service.current(ctx.session)
        quotas.set_quota(ctx.session, ref.subscription_id, place, name, limit, catalogue, ctx.caller.name)
    except ValueError:
        return _page(ctx, ref, workspace, {key: "the limit must be a whole number of cores"}, 400)
    except CloudletError as exc:
        if exc.status != 400:
            raise
        return _page(ctx, ref, workspace, {key: exc.message}, 400)
    return RedirectResponse(shell.ws_url(ref, "quota"), status_code=303)


@router.post(WS)
async def set_limit(
    request: Request, sub: str, rg: str, ws: str, ctx: Context = Depends(context)
) -> Response:
    """An administrator's new limit for one quota of one location."""
    return await posted(request, _raise, ctx, sub, rg, ws)
