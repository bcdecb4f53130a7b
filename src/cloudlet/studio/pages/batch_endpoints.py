"""Batch endpoints (issue 28 item 2): the Endpoints page's second tab, as Azure ML studio's.

``…/batch-endpoints`` lists them; ``…/batch-endpoints/{name}`` shows the deployments (the default
marked), invokes the endpoint on a data asset or an uploaded folder, and lists its invocations
(jobs, linked to their job page) with their predictions to download; while one runs, that table
comes again by ``…/invocations/live`` (``studio.live``: ``invocations`` events, the table's HTML,
whenever it changed; ``end`` once every invocation is final). Endpoints and deployments
are created from their YAML in the editor. Every write is ``services/endpoints/batch_endpoints``'
(the REST routes' service), which checks the caller's role; a folder is stored by
``assets.folder_uploads`` as the CLI's upload stores it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from cloudlet.api.body_limits import body_limit
from cloudlet.api.deps import Context, context
from cloudlet.domain.access.roles import Access
from cloudlet.domain.endpoints import batch_endpoints as rules
from cloudlet.domain.errors import CloudletError, validation_error
from cloudlet.services.access import workspaces
from cloudlet.services.assets import assets as asset_service
from cloudlet.services.assets import folder_uploads
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.services.core.storage import empty_tar
from cloudlet.services.endpoints import batch_endpoints as service
from cloudlet.services.endpoints import batch_results
from cloudlet.services.jobs import job_documents, job_outputs
from cloudlet.services.jobs.job_status import FINAL_VALUES
from cloudlet.studio import live, shell
from cloudlet.studio.session import PREFIX, StudioRoute, posted
from cloudlet.studio.uploads import json_answer

router = APIRouter(prefix=PREFIX, route_class=StudioRoute, include_in_schema=False)
ACTIVE = "endpoints"  # the navigation's item: the Endpoints page, whose second tab this is
WS = "/ws/{sub}/{rg}/{ws}/batch-endpoints"
EP = WS + "/{name}"
INVOCATIONS_POLL_S = 1.0
MAX_FOLDER = 64 << 20  # one folder from a browser; the CLI uploads larger ones
ENDPOINT_EXAMPLE = """\
$schema: https://azuremlschemas.azureedge.net/latest/batchEndpoint.schema.json
name: my-batch-endpoint
description: Scores files in batches.
"""
DEPLOYMENT_EXAMPLE = """\
$schema: https://azuremlschemas.azureedge.net/latest/modelBatchDeployment.schema.json
name: blue
code_configuration:
  code: src            # this folder, as the code archive below
  scoring_script: score.py
compute: azureml:cpu-cluster
mini_batch_size: 10
output_action: append_row
output_file_name: predictions.csv
"""


def when(stamp: float | None) -> str:
    """A time as the pages show it (UTC, to the minute)."""
    return datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%d %H:%M UTC") if stamp else "—"


def _render(
    ctx: Context, template: str, sub: str, rg: str, ws: str, status: int = 200, **values: Any
) -> HTMLResponse:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    return shell.render(
        ctx, template, ref, workspace, active=ACTIVE, status=status, endpoint_tab="batch", when=when, **values
    )


@router.get(WS)
def batch_list(sub: str, rg: str, ws: str, ctx: Context = Depends(context)) -> HTMLResponse:
    workspace, _ = shell.open_workspace(ctx, sub, rg, ws)
    rows = [
        (row, service.deployments(ctx.session, row)) for row in service.list_endpoints(ctx.session, workspace)
    ]
    return _render(ctx, "batch_list.html", sub, rg, ws, rows=rows)


# -- create from YAML --------------------------------------------------------------------------
def _endpoint_form(
    ctx: Context, sub: str, rg: str, ws: str, text: str, error: CloudletError | None = None
) -> HTMLResponse:
    return _render(ctx, "batch_new.html", sub, rg, ws, text=text, **shell.editor_error(text, error))


@router.get(WS + "/_new")
def new_endpoint(sub: str, rg: str, ws: str, ctx: Context = Depends(context)) -> HTMLResponse:
    shell.open_workspace(ctx, sub, rg, ws, Access.WRITE)  # a Reader gets no form to fill
    return _endpoint_form(ctx, sub, rg, ws, ENDPOINT_EXAMPLE)


def _create_endpoint(ctx: Context, sub: str, rg: str, ws: str, form: dict[str, str]) -> Response:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws, Access.WRITE)
    text = form.get("yaml", "")
    try:
        doc = job_documents.parse_yaml(text)
        name = str(doc.get("name") or "")
        if not rules.NAME_PATTERN.fullmatch(name):
            raise validation_error("name", f"name: {rules.NAME_RULE}")
        service.create_or_update_endpoint(ctx.session, ref, workspace, name, doc, ctx.caller)
    except CloudletError as exc:
        if exc.status in (401, 403, 404):
            raise
        return _endpoint_form(ctx, sub, rg, ws, text, exc)
    return RedirectResponse(shell.ws_url(ref, "batch-endpoints", name), status_code=303)


@router.post(WS + "/_new")
async def create_endpoint(
    sub: str, rg: str, ws: str, request: Request, ctx: Context = Depends(context)
) -> Response:
    return await posted(request, _create_endpoint, ctx, sub, rg, ws)


# -- an endpoint -------------------------------------------------------------------------------
def _endpoint_page(
    ctx: Context,
    sub: str,
    rg: str,
    ws: str,
    name: str,
    status: int = 200,
    error: CloudletError | None = None,
    deployment_text: str = DEPLOYMENT_EXAMPLE,
    code: str = "",
    deployment_error: bool = False,  # ERROR is the deployment form's: open it, mark its line
) -> HTMLResponse:
    workspace, _ = shell.open_workspace(ctx, sub, rg, ws)
    endpoint = service.get_endpoint(ctx.session, workspace, name)
    line = job_documents.line_of(deployment_text, error.target) if error and deployment_error else None
    return _render(
        ctx,
        "batch_endpoint.html",
        sub,
        rg,
        ws,
        status,
        **_invocations(ctx, workspace, endpoint),
        default=(endpoint.spec.get("defaults") or {}).get("deployment_name"),
        deployments=service.deployments(ctx.session, endpoint),
        data_assets=asset_service.list_assets(ctx.session, workspace, "data"),
        error=error,
        error_line=line,
        deployment_text=deployment_text,
        deployment_error=deployment_error,
        code=code,
    )


@router.get(EP)
def endpoint_page(sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)) -> HTMLResponse:
    return _endpoint_page(ctx, sub, rg, ws, name)


def _invocations(ctx: Context, workspace: Any, endpoint: Any) -> dict[str, Any]:
    """What ``batch_invocations.html`` shows: the newest 100 jobs, each with its predictions
    file's name; ``running``: one is not final yet (the table is live)."""
    jobs = service.invocations(ctx.session, workspace, endpoint.name)[:100]
    return {
        "endpoint": endpoint,
        "jobs": [(job, batch_results.predictions_name(job)) for job in jobs],
        "running": any(job.status not in FINAL_VALUES for job in jobs),
    }


@router.get(EP + "/invocations/live")
def invocations_stream(
    sub: str, rg: str, ws: str, name: str, request: Request, ctx: Context = Depends(context)
) -> Response:
    """``text/event-stream``: ``invocations`` (the table's HTML, for htmx's ``sse-swap``) whenever
    it changed; ``end`` once every invocation is final (or the endpoint is gone)."""
    workspace, _ = shell.open_workspace(ctx, sub, rg, ws)
    service.get_endpoint(ctx.session, workspace, name)  # a 404 before the stream starts
    state = ctx.state

    def render() -> tuple[str, bool]:
        with live.PollContext(state, request) as again:
            workspace, ref = shell.open_workspace(again, sub, rg, ws)
            values = _invocations(again, workspace, service.get_endpoint(again.session, workspace, name))
            view = shell.WorkspaceView(workspace.id, ref, workspace.location)
            markup = shell.render_text(
                request, "batch_invocations.html", again.caller, view, when=when, **values
            )
            return markup, not values["running"]

    def allowed(caller: Caller) -> None:
        with state.read_sessions() as session:
            workspaces.resolve(session, WorkspaceRef(sub, rg, ws), caller, Access.READ)

    return live.respond(request, live.FragmentFeed("invocations", render), allowed, INVOCATIONS_POLL_S)


def _add_deployment(ctx: Context, sub: str, rg: str, ws: str, name: str, form: dict[str, str]) -> Response:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws, Access.WRITE)
    text, code = form.get("yaml", ""), form.get("code", "")
    try:
        doc = job_documents.parse_yaml(text)
        deployment = str(doc.get("name") or "")
        if not rules.NAME_PATTERN.fullmatch(deployment):
            raise validation_error("name", f"name: {rules.NAME_RULE}")
        if code and isinstance(doc.get("code_configuration"), dict):
            doc["code_configuration"] = {**doc["code_configuration"], "code": code}
        doc.pop("endpoint_name", None)  # the page's endpoint
        service.create_or_update_deployment(
            ctx.session,
            ref,
            workspace,
            name,
            deployment,
            doc,
            ctx.caller,
            ctx.state.data,
            form.get("set_default") == "on",
        )
    except CloudletError as exc:
        if exc.status in (401, 403, 404):
            raise
        return _endpoint_page(ctx, sub, rg, ws, name, exc.status, exc, text, code, deployment_error=True)
    return RedirectResponse(shell.ws_url(ref, "batch-endpoints", name), status_code=303)


@router.post(EP + "/deployments")
async def add_deployment(
    sub: str, rg: str, ws: str, name: str, request: Request, ctx: Context = Depends(context)
) -> Response:
    """A deployment from its YAML (its local code as the archive uploaded by the page, as for a job)."""
    return await posted(request, _add_deployment, ctx, sub, rg, ws, name)


@router.post(EP + "/upload")
@body_limit(MAX_FOLDER)
async def upload_folder(
    sub: str, rg: str, ws: str, name: str, request: Request, ctx: Context = Depends(context)
) -> Response:
    """The raw bytes of a .zip or .tar.gz of a folder (the page packs a picked folder into one):
    stored as the CLI stores a local input; answers ``{"uri": "azureml://…"}``."""
    archive = await request.body()
    folder = request.query_params.get("folder") or "upload"

    def store() -> dict[str, Any]:
        workspace, _ = shell.open_workspace(ctx, sub, rg, ws, Access.WRITE)
        uri = folder_uploads.store_folder(ctx.session, ctx.state.data, workspace, archive, folder)
        return {"uri": uri, "size": len(archive)}

    return await json_answer(store)


def _invoke(ctx: Context, sub: str, rg: str, ws: str, name: str, form: dict[str, str]) -> Response:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws, Access.WRITE)
    source = form.get("source", "asset")
    given = form.get("upload_uri", "") if source == "upload" else form.get("data_asset", "")
    body: dict[str, Any] = {"input": given.strip()}
    for key in ("deployment_name", "job_name"):
        if form.get(key, "").strip():
            body[key] = form[key].strip()
    try:
        if not body["input"]:
            raise validation_error("input", "choose a data asset, or upload a folder first")
        job = service.invoke(
            ctx.session, workspace, name, rules.parse_invoke(body), ctx.caller, ctx.state.data
        )
    except CloudletError as exc:
        if exc.status in (401, 403, 404):
            raise
        return _endpoint_page(ctx, sub, rg, ws, name, exc.status, exc)
    return RedirectResponse(
        shell.ws_url(ref, "batch-endpoints", name) + f"?invoked={job.name}#invocations", status_code=303
    )


@router.post(EP + "/invoke")
async def invoke(
    sub: str, rg: str, ws: str, name: str, request: Request, ctx: Context = Depends(context)
) -> Response:
    return await posted(request, _invoke, ctx, sub, rg, ws, name)


@router.get(EP + "/jobs/{job}/predictions")
def predictions(sub: str, rg: str, ws: str, name: str, job: str, ctx: Context = Depends(context)) -> Response:
    """The invocation's predictions file, as an attachment."""
    workspace, _ = shell.open_workspace(ctx, sub, rg, ws)
    found = batch_results.invocation(ctx.session, workspace, name, job)
    filename, body = batch_results.predictions(ctx.session, ctx.state.data, workspace, found)
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", f"{job}-{filename}")  # a header's safe characters
    headers = {"Content-Disposition": f'attachment; filename="{safe}"', "Cache-Control": "no-store"}
    return Response(body, media_type="application/octet-stream", headers=headers)


@router.get(EP + "/jobs/{job}/score.tar.gz")
def score_output(
    sub: str, rg: str, ws: str, name: str, job: str, ctx: Context = Depends(context)
) -> Response:
    """The invocation's whole ``score`` output folder as a tar.gz (the CLI's ``job download``'s)."""
    workspace, _ = shell.open_workspace(ctx, sub, rg, ws)
    found = batch_results.invocation(ctx.session, workspace, name, job)
    packed = job_outputs.pack(ctx.session, ctx.state.data, workspace, found, rules.OUTPUT_NAME)
    headers = {
        "Content-Disposition": f'attachment; filename="{job}-score.tar.gz"',
        "Cache-Control": "no-store",
    }
    return Response(packed or empty_tar(), media_type="application/gzip", headers=headers)
