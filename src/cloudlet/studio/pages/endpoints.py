"""Online endpoints (issue 28 item 1): the list (Azure ML studio's "Real-time endpoints" tab) and an
endpoint's page with its tabs — Details (deployments, autoscale, scoring URI), Test, Consume (keys,
snippets), Traffic (sliders), Logs and Monitoring.

Reads are the REST door's (``services/endpoints/online_endpoints`` and the runtime's ``live`` view
of each deployment); what a page shows is ``endpoint_view``'s, the writes are in
``endpoint_actions``, the create forms in ``endpoint_forms``.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import HTMLResponse, JSONResponse

from cloudlet.api.deps import Context, context
from cloudlet.services.endpoints import online_endpoints as online
from cloudlet.services.endpoints import online_metrics
from cloudlet.studio import shell
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
    """The Logs tab's log box alone (its Refresh button swaps it in)."""
    workspace, ref, row = endpoint_row(ctx, sub, rg, ws, name)
    view = shell.WorkspaceView(workspace.id, ref, workspace.location)
    values = logs_values(ctx, workspace, row, deployment)
    return shell.render_html(
        ctx.request, "endpoint_log_box.html", ctx.caller, view, e={"name": name}, **values
    )


@router.get(WS + "/{name}/metrics.json")
def endpoint_metrics(
    sub: str, rg: str, ws: str, name: str, since: float = 0.0, ctx: Context = Depends(context)
) -> JSONResponse:
    """Each deployment's counters now (requests, failures, mean latency: every worker's, the
    store's ``online_metrics`` plus this worker's unflushed) and the p50/p95 latency of the
    requests this worker's gateway answered after SINCE (wall time). The Monitoring tab polls this
    with its previous answer's ``t`` and draws each interval."""
    workspace, ref, row = endpoint_row(ctx, sub, rg, ws, name)
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
    return JSONResponse({"t": time.time(), "poll_s": MONITOR_POLL_S, "deployments": counts})
