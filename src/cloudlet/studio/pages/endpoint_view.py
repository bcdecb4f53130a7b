"""What an online endpoint's page shows, shared by its reads (``endpoints``) and the writes that
answer with the page (``endpoint_actions``): the endpoint and its deployments as the REST door
renders them, each tab's values, and the page in the shell."""

from __future__ import annotations

from typing import Any

from fastapi.responses import HTMLResponse

from cloudlet.api.deps import Context
from cloudlet.domain.endpoints import online_endpoints as rules
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.endpoints import online_endpoints as online
from cloudlet.studio import shell

ACTIVE = "endpoints"
TABS = (
    ("details", "Details"),
    ("test", "Test"),
    ("consume", "Consume"),
    ("traffic", "Traffic"),
    ("logs", "Logs"),
    ("monitoring", "Monitoring"),
)
LOG_LINES = 200


def endpoint_row(ctx: Context, sub: str, rg: str, ws: str, name: str) -> tuple[Any, WorkspaceRef, Any]:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    return workspace, ref, online.get_endpoint(ctx.session, workspace, name)


def deployments_view(ctx: Context, ref: WorkspaceRef, workspace: Any, row: Any) -> list[dict[str, Any]]:
    """Each deployment as ``GET …/deployments`` renders it (its replicas and metrics included)."""
    runtime = ctx.state.online
    return [
        online.render_deployment(d, ref, row.name, runtime.live(ctx.session, workspace.id, row.name, d.name))
        for d in online.deployments_of(ctx.session, row)
    ]


def page_values(ctx: Context, ref: WorkspaceRef, workspace: Any, row: Any, tab: str) -> dict[str, Any]:
    """What every tab of an endpoint's page shows: the endpoint and its deployments."""
    deployments = deployments_view(ctx, ref, workspace, row)
    return {
        "e": online.render_endpoint(row, ref, ctx.state.endpoint),
        "deployments": deployments,
        "tab": tab,
        "tabs": TABS,
        "max_mirror": rules.MAX_MIRROR_PERCENT,
        "pinned_header": rules.PINNED_HEADER,
    }


def render_page(
    ctx: Context, ref: WorkspaceRef, workspace: Any, row: Any, tab: str, status: int = 200, **extra: Any
) -> HTMLResponse:
    values = {**page_values(ctx, ref, workspace, row, tab), **extra}
    return shell.render(ctx, "endpoint_page.html", ref, workspace, active=ACTIVE, status=status, **values)


def logs_values(ctx: Context, workspace: Any, row: Any, deployment: str | None) -> dict[str, Any]:
    """The chosen deployment's inference server log tail (the REST ``getLogs``'s) and its stage."""
    names = [d.name for d in online.deployments_of(ctx.session, row)]
    chosen = deployment if deployment in names else (names[0] if names else None)
    text, found = "", None
    if chosen is not None:
        found = online.get_deployment(ctx.session, row, chosen)
        text = ctx.state.online.logs(workspace.id, row.name, chosen, LOG_LINES)
    return {
        "log_deployment": chosen,
        "log_text": text,
        "log_stage": found.stage if found is not None else None,
        "log_state": found.provisioning_state if found is not None else None,
        "log_reason": found.reason if found is not None else None,
        "log_lines": LOG_LINES,
    }
