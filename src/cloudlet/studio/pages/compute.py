"""Compute: the tabs Azure ML users know (instances, clusters, attached, locations), a compute's
page (an instance's apps, SSH and schedules; a cluster's nodes and why it is or is not scaled, its
min/max/idle form), the instance actions, and the one-click door to JupyterLab.

Every write is one service call (``services.compute.computes``, as the REST door makes it); the create
form and YAML are in ``compute_forms``. A list's table and a compute's state come again from the
server whenever they change: server-sent event streams (``studio.live``) that htmx swaps in.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from cloudlet.api.deps import AppState, Context, context
from cloudlet.domain.access.roles import Access
from cloudlet.domain.compute.compute_types import ATTACHED, ComputeType
from cloudlet.domain.errors import CloudletError, not_found
from cloudlet.services.access import instance_signin, workspaces
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import computes, locations, operations
from cloudlet.services.compute import instances as instance_service
from cloudlet.services.compute import locks as lock_store
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.services.views import computes as compute_view
from cloudlet.services.views import fair_share as fair_share_view
from cloudlet.services.views import operations as operation_view
from cloudlet.studio import live, shell
from cloudlet.studio.pages import compute_forms
from cloudlet.studio.session import PREFIX, StudioRoute, posted

router = APIRouter(prefix=PREFIX, route_class=StudioRoute, include_in_schema=False)
router.include_router(compute_forms.router)  # before "/{name}", which would take "_new"
NAV = shell.NavItem("compute", "Compute", "compute", "compute")
WS = "/ws/{sub}/{rg}/{ws}/compute"
TABS = (
    ("instances", "Compute instances"),
    ("clusters", "Compute clusters"),
    ("attached", "Attached computes"),
    ("locations", "Locations"),
)
TYPES_OF_TAB = {
    "instances": {ComputeType.COMPUTE_INSTANCE},
    "clusters": {ComputeType.AMLCOMPUTE},
    "attached": set(ATTACHED),
}
# The instance's apps the studio opens: key in the URL → (label, path under JupyterLab's base URL),
# as the instance's ``services`` list them.
APPS = {label.lower().replace(" ", ""): (label, path) for label, path in instance_service.SERVICES}
POLL_S = 1.0  # how often a list's or a compute's stream renders it again (sent when it changed)


def _tab(value: str | None) -> str:
    return value if value in dict(TABS) else "instances"


def _rows(ctx: Context, ref: WorkspaceRef, ws: Any, tab: str) -> list[dict[str, Any]]:
    """The tab's computes, each as the REST list renders it."""
    if tab == "locations":
        return []
    wanted = TYPES_OF_TAB[tab]
    locks = lock_store.effective(ctx.session, ref)
    catalogue = catalogue_service.current(ctx.session)
    return [
        compute_view.render(c, ref, locks, catalogue, ctx.state.endpoint)
        for c in computes.list_all(ctx.session, ws)
        if c.type in wanted
    ]


def _locations(ctx: Context, ws: Any) -> list[dict[str, Any]]:
    """Every location for an administrator; a user sees the workspace's own (its name only)."""
    if ctx.caller.is_admin:
        return [locations.render(row) for row in locations.list_all(ctx.session)]
    return [{"name": ws.location, "provider": None, "capacity": None}]


def _list_values(ctx: Context, ref: WorkspaceRef, ws: Any, tab: str) -> dict[str, Any]:
    return {
        "tab": tab,
        "tabs": TABS,
        "rows": _rows(ctx, ref, ws, tab),
        "places": _locations(ctx, ws) if tab == "locations" else [],
        "live_url": shell.ws_url(ref, "compute", "_live") + "?" + urllib.parse.urlencode({"tab": tab}),
        "apps": APPS,
    }


@router.get(WS)
def compute_list(
    sub: str, rg: str, ws: str, tab: str | None = None, ctx: Context = Depends(context)
) -> HTMLResponse:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    values = _list_values(ctx, ref, workspace, _tab(tab))
    return shell.render(ctx, "compute.html", ref, workspace, active=NAV.key, **values)


@router.get(WS + "/_live")  # "_": no compute name starts so
def compute_rows_stream(
    sub: str, rg: str, ws: str, request: Request, tab: str | None = None, ctx: Context = Depends(context)
) -> Response:
    """``text/event-stream``: ``rows``, the tab's table, whenever it changed."""
    shell.open_workspace(ctx, sub, rg, ws)  # a 404 before the stream starts
    state, shown_tab = ctx.state, _tab(tab)

    def render() -> tuple[str, bool]:
        with live.PollContext(state, request) as again:
            workspace, ref = shell.open_workspace(again, sub, rg, ws)
            values = _list_values(again, ref, workspace, shown_tab)
            view = shell.WorkspaceView(workspace.id, ref, workspace.location)
            return shell.render_text(request, "compute_rows_body.html", again.caller, view, **values), False

    feed = live.FragmentFeed("rows", render)
    return live.respond(request, feed, _readable(state, sub, rg, ws), POLL_S)


def _readable(state: AppState, sub: str, rg: str, ws: str) -> Callable[[Caller], None]:
    """The workspace read check again, for the caller as the session now resolves it."""

    def check(caller: Caller) -> None:
        with state.read_sessions() as session:
            workspaces.resolve(session, WorkspaceRef(sub, rg, ws), caller, Access.READ)

    return check


# -- one compute --------------------------------------------------------------------------------
def _detail_values(
    ctx: Context, ref: WorkspaceRef, compute: Any, op_id: str | None, tab: str | None
) -> dict[str, Any]:
    shown = compute_view.view(ctx.session, ref, compute, ctx.state.endpoint)
    op = None
    if op_id:
        try:
            op = operation_view.render(operations.visible(ctx.session, ctx.caller, op_id), ref)
        except CloudletError:
            op = None  # an id from another workspace or a stale link: no progress to show
    if op is None:
        running = operations.in_progress(ctx.session, operations.Target.of_compute(compute))
        op = operation_view.render(running, ref) if running is not None else None
    nodes = []
    if compute.type == ComputeType.AMLCOMPUTE:
        nodes = [node_service.render(n) for n in node_service.live_nodes(ctx.session, compute.id)]
    is_owner = compute.type == ComputeType.COMPUTE_INSTANCE and compute.owner == ctx.caller.name
    cluster = compute.type == ComputeType.AMLCOMPUTE
    shared = cluster and fair_share_view.has_shares(ctx.session, compute)
    shown_tab = tab if (tab == "nodes" and cluster) or (tab == "fairshare" and shared) else "details"
    query = {"tab": shown_tab, **({"op": op["id"]} if op is not None else {})}
    live_url = shell.ws_url(ref, "compute", compute.name, "live") + "?" + urllib.parse.urlencode(query)
    return {
        "tab": shown_tab,
        "c": shown,
        "op": op,
        "nodes": nodes,
        "is_owner": is_owner,
        "apps": APPS if shown.get("services") else {},
        "live_url": live_url,
        "shared": shared,  # the pool has team shares: a Fair share tab (issue 31)
        "pool": fair_share_view.pool_view(ctx.session, compute) if shown_tab == "fairshare" else None,
    }


def _compute(ctx: Context, sub: str, rg: str, ws: str, name: str) -> tuple[Any, WorkspaceRef, Any]:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    return workspace, ref, computes.get(ctx.session, workspace, name)


@router.get(WS + "/{name}")
def compute_page(
    sub: str,
    rg: str,
    ws: str,
    name: str,
    tab: str | None = None,
    op: str | None = None,
    ctx: Context = Depends(context),
) -> HTMLResponse:
    workspace, ref, compute = _compute(ctx, sub, rg, ws, name)
    values = _detail_values(ctx, ref, compute, op, tab)
    return shell.render(
        ctx, "compute_detail.html", ref, workspace, active=NAV.key, errors={}, form={}, **values
    )


@router.get(WS + "/{name}/live")
def compute_stream(
    sub: str,
    rg: str,
    ws: str,
    name: str,
    request: Request,
    op: str | None = None,
    tab: str | None = None,
    ctx: Context = Depends(context),
) -> Response:
    """``text/event-stream``: ``status``, the compute's state, its operation's progress and its
    nodes, whenever they changed; ``end`` when the compute is gone."""
    _compute(ctx, sub, rg, ws, name)  # a 404 before the stream starts
    state = ctx.state

    def render() -> tuple[str, bool]:
        with live.PollContext(state, request) as again:
            workspace, ref, compute = _compute(again, sub, rg, ws, name)
            values = _detail_values(again, ref, compute, op, tab)
            view = shell.WorkspaceView(workspace.id, ref, workspace.location)
            return shell.render_text(request, "compute_status_body.html", again.caller, view, **values), False

    feed = live.FragmentFeed("status", render)
    return live.respond(request, feed, _readable(state, sub, rg, ws), POLL_S)


# -- writes -------------------------------------------------------------------------------------
def _back(ref: WorkspaceRef, name: str, op_id: str | None = None) -> RedirectResponse:
    url = shell.ws_url(ref, "compute", name)
    return RedirectResponse(url + (f"?op={urllib.parse.quote(op_id)}" if op_id else ""), status_code=303)


EDITABLE = ("min_instances", "max_instances", "idle_time_before_scale_down")


def _whole_numbers(form: dict[str, str]) -> tuple[dict[str, int], dict[str, str]]:
    changes: dict[str, int] = {}
    errors: dict[str, str] = {}
    for field in EDITABLE:
        raw = form.get(field, "").strip()
        if not raw:
            continue
        try:
            changes[field] = int(raw)
        except ValueError:
            errors[field] = f"{field} must be a whole number"
    return changes, errors


@router.post(WS + "/{name}/scale")
async def compute_scale(
    request: Request, sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)
) -> Response:
    """A cluster's min/max nodes and idle time: the same service update as the REST PATCH."""
    return await posted(request, _scale, ctx, sub, rg, ws, name)


def _scale(ctx: Context, sub: str, rg: str, ws: str, name: str, form: dict[str, str]) -> Response:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws, Access.WRITE)
    changes, errors = _whole_numbers(form)
    if not errors:
        try:
            result = computes.patch(
                ctx.session, ref, workspace, name, changes, ctx.caller, ctx.state.endpoint
            )
            return _back(ref, name, result.operation.id)
        except CloudletError as exc:
            if exc.status != 400:
                raise
            errors[exc.target if exc.target in EDITABLE else "form"] = exc.message
    compute = computes.get(ctx.session, workspace, name)
    values = _detail_values(ctx, ref, compute, None, "details")
    return shell.render(
        ctx,
        "compute_detail.html",
        ref,
        workspace,
        active=NAV.key,
        status=400,
        errors=errors,
        form=form,
        **values,
    )


@router.post(WS + "/{name}/{action}")
def compute_action(
    sub: str,
    rg: str,
    ws: str,
    name: str,
    action: Literal["start", "stop", "restart", "delete"],
    ctx: Context = Depends(context),
) -> Response:
    """Start, stop, restart or delete: the REST door's service call; then the compute's page, with
    the operation's progress (a deleted compute's list)."""
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws, Access.WRITE)
    if action == "delete":
        computes.delete(ctx.session, ref, workspace, name, ctx.caller)
        return RedirectResponse(shell.ws_url(ref, "compute"), status_code=303)
    op = computes.act(ctx.session, ref, workspace, name, action, ctx.caller)
    return _back(ref, name, op.id)


# -- JupyterLab, Jupyter, a terminal ------------------------------------------------------------
def _app_of(ctx: Context, sub: str, rg: str, ws: str, name: str, app: str) -> tuple[Any, WorkspaceRef, Any]:
    workspace, ref, compute = _compute(ctx, sub, rg, ws, name)
    if compute.type != ComputeType.COMPUTE_INSTANCE or app not in APPS:
        raise not_found("App", app)
    return workspace, ref, compute


@router.get(WS + "/{name}/open/{app}")
def open_app_page(
    sub: str, rg: str, ws: str, name: str, app: str, ctx: Context = Depends(context)
) -> HTMLResponse:
    """A link to an app (a bookmark, an old page) shows a button that opens it: the sign-in cookie
    is set by the POST, never by a GET."""
    workspace, ref, compute = _app_of(ctx, sub, rg, ws, name, app)
    return shell.render(
        ctx,
        "compute_open.html",
        ref,
        workspace,
        active=NAV.key,
        c={"name": compute.name},
        app=app,
        app_label=APPS[app][0],
    )


@router.post(WS + "/{name}/open/{app}")
def open_app(sub: str, rg: str, ws: str, name: str, app: str, ctx: Context = Depends(context)) -> Response:
    """The instance's app, one click from the studio (a CSRF-checked POST): the browser gets the
    proxy's sign-in cookie for the same caller (so no second sign-in), then goes to the proxy, which
    lets the owner alone through (another user's instance: 403 there)."""
    _, _, compute = _app_of(ctx, sub, rg, ws, name, app)
    path = APPS[app][1]
    value, lifetime = instance_signin.mint(ctx.session, ctx.caller, ctx.state.token_secret)
    target = instance_service.app_base_url(compute.name) + path
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        instance_signin.COOKIE,
        value,
        max_age=lifetime,
        path=instance_signin.COOKIE_PATH,
        httponly=True,
        samesite="lax",
        secure=ctx.request.url.scheme == "https",
    )
    return response
