"""A workspace's Home: its recent jobs and its computes, from the services' own list functions."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import HTMLResponse, RedirectResponse

from cloudlet.api.deps import Context, context
from cloudlet.services.compute import computes
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.jobs import jobs as job_service
from cloudlet.studio import shell
from cloudlet.studio.session import PREFIX, StudioRoute

router = APIRouter(prefix=PREFIX, route_class=StudioRoute, include_in_schema=False)
NAV = shell.NavItem("home", "Home", "", "home")
RECENT_JOBS = 10


@router.get("/ws/{sub}/{rg}/{ws}")
def home_without_slash(sub: str, rg: str, ws: str) -> RedirectResponse:
    return RedirectResponse(shell.ws_url(WorkspaceRef(sub, rg, ws)), status_code=307)


@router.get("/ws/{sub}/{rg}/{ws}/")
def home(sub: str, rg: str, ws: str, ctx: Context = Depends(context)) -> HTMLResponse:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    recent = job_service.list_jobs(ctx.session, workspace, top=RECENT_JOBS).jobs
    rows = computes.list_all(ctx.session, workspace)
    return shell.render(ctx, "home.html", ref, workspace, active=NAV.key, jobs=recent, computes=rows)
