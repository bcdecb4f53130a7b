"""Online endpoints (issue 28 item 1): the list (Azure ML studio's "Real-time endpoints" tab) and an
endpoint's page with its tabs — Details (deployments, autoscale, scoring URI), Test, Consume (keys,
snippets), Traffic (sliders), Logs and Monitoring.

The Monitoring tab's counters and the Logs tab's log tail come by server-sent event streams
(``studio.live``): ``…/{name}/metrics/live`` (``metrics``, every 2 s: the counters and the
latency percentiles of the requests answered since the last event) and ``…/{name}/logs/live``
(``logs``: the log box's HTML whenever it changed); each ends when the endpoint is gone.

Reads are the REST door's (``services/endpoints/online_endpoints`` and the runtime's ``live`` view
of each deployment); what a page shows is ``endpoint_view``'s, the writes are in
``endpoint_actions``, the create forms in ``endpoint_forms``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from cloudlet.api.deps import AppState, Context, context
from cloudlet.domain.access.roles import Access
from cloudlet.domain.errors import CloudletError
from cloudlet.services.access import workspaces
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.services.endpoints import online_endpoints as online
from cloudlet.services.endpoints import online_metrics
from cloudlet.studio import live, shell
from cloudlet.studio.pages import endpoint_actions, endpoint_forms
from cloudlet.studio.pages.endpoint_view import (
    TABS,
    deployments_view,
    endpoint_row,
    logs_values,
    render_page,
)
from cloudlet.studio.session import PREFIX, StudioRoute

router = APIRouter(prefix=PREFIX, route_class=StudioRoute, include_in_schema=False)
router.include_router(endpoint_forms.router)  # "_new" before "/{name}"
router.include_router(endpoint_actions.router)
NAV = shell.NavItem("endpoints", "Endpoints", "endpoints", "endpoints")
WS = "/ws/{sub}/{rg}/{ws}/endpoints"
MONITOR_POLL_S = 2
LOG_POLL_S = 1.0


@router.get(WS)
def endpoint_list(sub: str, rg: str, ws: str, ctx: Context = Depends(context)) -> HTMLResponse:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    rows = []
    for row in online.list_endpoints(ctx.session, workspace):
        shown = online.render_endpoint(row, ref, ctx.state.endpoint)
        shown["deployments"] = [d.name for d in online.deployments_of(ctx.session, row)]
        rows.append(shown)
    return shell.render(
        ctx, "endpoints.html", ref, workspace, active=NAV.key, rows=rows, endpoint_tab="online"
    )


@router.get(WS + "/{name}")
def endpoint_page(
    sub: str,
    rg: str,
    ws: str,
    name: str,
    tab: str | None = None,
    deployment: str | None = None,
    ctx: Context = Depends(context),
) -> HTMLResponse:
    workspace, ref, row = endpoint_row(ctx, sub, rg, ws, name)
    shown_tab = tab if tab in dict(TABS) else "details"
    extra: dict[str, Any] = {}
    if shown_tab == "logs":
        extra = logs_values(ctx, workspace, row, deployment)
    return render_page(ctx, ref, workspace, row, shown_tab, **extra)


@router.get(WS + "/{name}/logs")
def endpoint_logs(
    sub: str, rg: str, ws: str, name: str, deployment: str | None = None, ctx: Context = Depends(context)
) -> HTMLResponse:
    """The Logs tab's log box alone, once (the tab itself follows ``…/logs/live``)."""
    workspace, ref, row = endpoint_row(ctx, sub, rg, ws, name)
    view = shell.WorkspaceView(workspace.id, ref, workspace.location)
    values = logs_values(ctx, workspace, row, deployment)
    return shell.render_html(
        ctx.request, "endpoint_log_box.html", ctx.caller, view, e={"name": name}, **values
    )


def _counters(ctx: Context, workspace: Any, ref: WorkspaceRef, row: Any, since: float) -> dict[str, Any]:
    """Each deployment's counters now (requests, failures, mean latency: every worker's, the
    store's ``online_metrics`` plus this worker's unflushed) and the p50/p95 latency of the
    requests this worker's gateway answered after SINCE (wall time), stamped ``t``."""
    counts = {}
    for shown in deployments_view(ctx, ref, workspace, row):
        metrics = shown.get("metrics") or {}
        samples = ctx.state.online.latencies(workspace.id, row.name, shown["name"])
        counts[shown["name"]] = {
            "requests": metrics.get("requests", 0),
            "failures": metrics.get("failures", 0),
            "mean_latency_ms": metrics.get("mean_latency_ms"),
            "in_flight": metrics.get("in_flight", 0),
            "ready_replicas": shown.get("ready_replicas", 0),
            **online_metrics.percentiles(samples, since),
        }
    return {"t": time.time(), "poll_s": MONITOR_POLL_S, "deployments": counts}


@router.get(WS + "/{name}/metrics.json")
def endpoint_metrics(
    sub: str, rg: str, ws: str, name: str, since: float = 0.0, ctx: Context = Depends(context)
) -> JSONResponse:
    """The counters once (``_counters``); the Monitoring tab follows ``…/metrics/live`` instead."""
    workspace, ref, row = endpoint_row(ctx, sub, rg, ws, name)
    return JSONResponse(_counters(ctx, workspace, ref, row, since))


def _readable(state: AppState, sub: str, rg: str, ws: str) -> Callable[[Caller], None]:
    """The workspace read check again, for the caller as the session now resolves it."""

    def check(caller: Caller) -> None:
        with state.read_sessions() as session:
            workspaces.resolve(session, WorkspaceRef(sub, rg, ws), caller, Access.READ)

    return check


@dataclass
class CounterFeed:
    """The Monitoring tab's counters, one ``metrics`` event a poll: each is an interval of the
    charts (the percentiles are of the requests answered since the last event)."""

    state: AppState
    request: Request
    where: tuple[str, str, str, str]
    since: float

    def poll(self) -> live.Step:
        sub, rg, ws, name = self.where
        try:
            with live.PollContext(self.state, self.request) as again:
                workspace, ref, row = endpoint_row(again, sub, rg, ws, name)
                body = _counters(again, workspace, ref, row, self.since)
        except CloudletError as exc:  # the endpoint is gone
            return live.Step([live.event("end", {"reason": exc.message})], done=True)
        self.since = body["t"]
        return live.Step([live.event("metrics", body)])


@router.get(WS + "/{name}/metrics/live")
def metrics_stream(
    sub: str, rg: str, ws: str, name: str, request: Request, ctx: Context = Depends(context)
) -> Response:
    """``text/event-stream``: ``metrics`` (``metrics.json``'s document) every 2 s."""
    endpoint_row(ctx, sub, rg, ws, name)  # a 404 before the stream starts
    feed = CounterFeed(ctx.state, request, (sub, rg, ws, name), time.time())
    return live.respond(request, feed, _readable(ctx.state, sub, rg, ws), MONITOR_POLL_S)


@router.get(WS + "/{name}/logs/live")
def logs_stream(
    sub: str,
    rg: str,
    ws: str,
    name: str,
    request: Request,
    deployment: str | None = None,
    ctx: Context = Depends(context),
) -> Response:
    """``text/event-stream``: ``logs`` (the log box's HTML, for htmx's ``sse-swap``) whenever the
    tail or the deployment's stage changed."""
    endpoint_row(ctx, sub, rg, ws, name)  # a 404 before the stream starts
    state = ctx.state

    def render() -> tuple[str, bool]:
        with live.PollContext(state, request) as again:
            workspace, ref, row = endpoint_row(again, sub, rg, ws, name)
            values = logs_values(again, workspace, row, deployment)
            view = shell.WorkspaceView(workspace.id, ref, workspace.location)
            markup = shell.render_text(
                request, "endpoint_log_box.html", again.caller, view, e={"name": name}, **values
            )
            return markup, False

    return live.respond(request, live.FragmentFeed("logs", render), _readable(state, sub, rg, ws), LOG_POLL_S)
