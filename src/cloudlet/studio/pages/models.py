"""Models (issue 28 item 3, for models): the registered models, a name's versions, a version's
details (its files as a tree to download, type, MLmodel flavors, tags, description, and what uses
it), archive and restore, and a new version registered from an upload or from a job's output.

Reads and writes go through ``services/assets/assets`` (the REST routes' service, which checks the
caller's role and audits) and ``services/assets/models`` (files, MLmodel, "used by", and a job's
output named as Azure names it: ``azureml://jobs/<job>/outputs/<output>/paths/<path>``).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from cloudlet.api.body_limits import body_limit
from cloudlet.api.deps import Context, context
from cloudlet.domain.access.roles import Access
from cloudlet.domain.assets.assets import NAME_PATTERN, NAME_RULE
from cloudlet.domain.errors import CloudletError, validation_error
from cloudlet.services.assets import assets as asset_service
from cloudlet.services.assets import folder_uploads
from cloudlet.services.assets import models as model_service
from cloudlet.services.jobs import job_search
from cloudlet.studio import shell
from cloudlet.studio.session import PREFIX, StudioRoute, form_of

router = APIRouter(prefix=PREFIX, route_class=StudioRoute, include_in_schema=False)
NAV = shell.NavItem("models", "Models", "models", "models")
WS = "/ws/{sub}/{rg}/{ws}/models"
VERSION = WS + "/{name}/versions/{version}"
MAX_FOLDER = 64 << 20  # one model folder from a browser; the CLI uploads larger ones
TYPES = ("custom_model", "mlflow_model", "triton_model")


def when(stamp: float | None) -> str:
    return datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%d %H:%M UTC") if stamp else "—"


def _render(
    ctx: Context, template: str, sub: str, rg: str, ws: str, status: int = 200, **values: Any
) -> HTMLResponse:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    return shell.render(ctx, template, ref, workspace, active=NAV.key, status=status, when=when, **values)


@router.get(WS)
def model_list(
    sub: str, rg: str, ws: str, archived: bool = False, ctx: Context = Depends(context)
) -> HTMLResponse:
    """Each model's latest version (``?archived=true``: the names whose every version is archived)."""
    workspace, _ = shell.open_workspace(ctx, sub, rg, ws)
    view = "archived_only" if archived else "active_only"
    rows = asset_service.containers(ctx.session, workspace, "model", view)
    return _render(ctx, "models_list.html", sub, rg, ws, rows=rows, archived=archived)


# -- register ----------------------------------------------------------------------------------
def _tags(text: str) -> dict[str, str]:
    """``key=value`` lines (or comma-separated) as tags."""
    out: dict[str, str] = {}
    for item in text.replace(",", "\n").splitlines():
        if item.strip():
            key, _, value = item.partition("=")
            if not key.strip():
                raise validation_error("tags", f"tag {item.strip()!r} has no key (key=value)")
            out[key.strip()] = value.strip()
    return out


def _register_form(
    ctx: Context, sub: str, rg: str, ws: str, form: dict[str, str], error: CloudletError | None = None
) -> HTMLResponse:
    workspace, _ = shell.open_workspace(ctx, sub, rg, ws)
    recent = job_search.search_jobs(
        ctx.session, workspace, job_search.JobQuery(statuses=("Completed",), top=50)
    )
    status = error.status if error is not None else 200
    job = form.get("job", "")
    outputs = model_service.outputs_of(ctx.session, workspace, job) if job else {}
    return _render(
        ctx,
        "models_register.html",
        sub,
        rg,
        ws,
        status,
        outputs=outputs,
        chosen=form.get("output", ""),
        picked=job,
        form=form,
        error=error,
        jobs=recent.jobs,
        types=TYPES,
    )


@router.get(WS + "/_new")
def register_page(
    sub: str, rg: str, ws: str, name: str = "", job: str = "", ctx: Context = Depends(context)
) -> HTMLResponse:
    shell.open_workspace(ctx, sub, rg, ws, Access.WRITE)  # a Reader gets no form to fill
    form = {
        "name": name,
        "job": job,
        "source": "job" if job else "upload",
        "output": "",
        "type": "custom_model",
    }
    return _register_form(ctx, sub, rg, ws, form)


@router.get(WS + "/_outputs")
def job_output_choices(
    sub: str, rg: str, ws: str, job: str = "", ctx: Context = Depends(context)
) -> HTMLResponse:
    """The picked job's outputs as the form's Output choices (htmx swaps them in)."""
    workspace, _ = shell.open_workspace(ctx, sub, rg, ws)
    outputs = model_service.outputs_of(ctx.session, workspace, job) if job else {}
    return shell.render_html(
        ctx.request, "partials/model_outputs.html", ctx.caller, outputs=outputs, chosen="", picked=job
    )


def _path_of(form: dict[str, str]) -> str:
    """The version's path: the uploaded folder's URI, or the job output's ``azureml://jobs/…``."""
    if form.get("source") == "job":
        job, output = form.get("job", "").strip(), form.get("output", "").strip()
        if not job or not output:
            raise validation_error("path", "pick a job and name one of its outputs")
        inner = form.get("output_path", "").strip().strip("/")
        return f"azureml://jobs/{job}/outputs/{output}" + (f"/paths/{inner}" if inner else "")
    uri = form.get("upload_uri", "").strip()
    if not uri:
        raise validation_error("path", "upload the model's files or folder first")
    return uri


def _register(ctx: Context, sub: str, rg: str, ws: str, form: dict[str, str]) -> Response:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws, Access.WRITE)
    name = form.get("name", "").strip()
    try:
        if not NAME_PATTERN.fullmatch(name):
            raise validation_error("name", f"name: {NAME_RULE}")
        body: dict[str, Any] = {"path": _path_of(form), "type": form.get("type") or "custom_model"}
        body["tags"] = _tags(form.get("tags", ""))
        if form.get("description", "").strip():
            body["description"] = form["description"].strip()
        asset = model_service.register(ctx.session, ref, workspace, name, body, ctx.caller, ctx.state.data)
    except CloudletError as exc:
        if exc.status in (401, 403):
            raise
        return _register_form(ctx, sub, rg, ws, form, exc)
    return RedirectResponse(shell.ws_url(ref, "models", name, "versions", asset.version), status_code=303)


@router.post(WS + "/_new")
async def register(sub: str, rg: str, ws: str, request: Request, ctx: Context = Depends(context)) -> Response:
    form = await form_of(request)
    response: Response = await run_in_threadpool(_register, ctx, sub, rg, ws, form)
    return response


@router.post(WS + "/_upload")
@body_limit(MAX_FOLDER)
async def upload(sub: str, rg: str, ws: str, request: Request, ctx: Context = Depends(context)) -> Response:
    """A model's folder as a .zip or .tar.gz (the page packs picked files into one), stored as the
    CLI stores a local model path; answers ``{"uri": "azureml://…"}``."""
    archive = await request.body()
    folder = request.query_params.get("folder") or "model"

    def store() -> str:
        workspace, _ = shell.open_workspace(ctx, sub, rg, ws, Access.WRITE)
        return folder_uploads.store_folder(ctx.session, ctx.state.data, workspace, archive, folder)

    try:
        uri = await run_in_threadpool(store)
    except CloudletError as exc:
        if exc.status in (401, 403):
            raise
        return JSONResponse({"error": exc.message, "field": exc.target}, status_code=exc.status)
    return JSONResponse({"uri": uri, "size": len(archive)})


# -- a model, a version ------------------------------------------------------------------------
@router.get(WS + "/{name}")
def versions(sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)) -> HTMLResponse:
    workspace, _ = shell.open_workspace(ctx, sub, rg, ws)
    rows = asset_service.list_versions(ctx.session, workspace, "model", name, "all")
    return _render(ctx, "models_versions.html", sub, rg, ws, name=name, rows=rows)


def _tree(files: list[model_service.ModelFile]) -> dict[str, Any]:
    """Paths as nested folders: name → sub-tree (a dict) or the file itself."""
    root: dict[str, Any] = {}
    for item in files:
        *folders, leaf = item.path.split("/")
        node = root
        for folder in folders:
            node = node.setdefault(folder + "/", {})
        node[leaf] = item
    return root


@router.get(VERSION)
def version_page(
    sub: str, rg: str, ws: str, name: str, version: str, ctx: Context = Depends(context)
) -> HTMLResponse:
    workspace, _ = shell.open_workspace(ctx, sub, rg, ws)
    asset = asset_service.get_version(ctx.session, workspace, "model", name, version)
    files, cut = model_service.files(ctx.state.data, workspace, asset)
    return _render(
        ctx,
        "models_version.html",
        sub,
        rg,
        ws,
        asset=asset,
        files_tree=_tree(files),
        file_count=len(files),
        cut=cut,
        mlmodel=model_service.mlmodel(ctx.state.data, workspace, asset),
        used_by=model_service.used_by(ctx.session, workspace, asset),
    )


@router.get(VERSION + "/files/{path:path}")
def download_file(
    sub: str, rg: str, ws: str, name: str, version: str, path: str, ctx: Context = Depends(context)
) -> Response:
    """One of the version's files, as an attachment (never rendered: a model's file is not a page)."""
    workspace, _ = shell.open_workspace(ctx, sub, rg, ws)
    asset = asset_service.get_version(ctx.session, workspace, "model", name, version)
    body = model_service.read_file(ctx.state.data, workspace, asset, path)
    leaf = re.sub(r"[^A-Za-z0-9._-]", "_", path.rsplit("/", 1)[-1])  # a header's safe characters
    headers = {"Content-Disposition": f'attachment; filename="{leaf}"', "Cache-Control": "no-store"}
    return Response(body, media_type="application/octet-stream", headers=headers)


def _archive(
    ctx: Context, sub: str, rg: str, ws: str, name: str, version: str | None, archived: bool
) -> Response:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws, Access.WRITE)
    asset_service.archive(ctx.session, ref, workspace, "model", name, version, archived, ctx.caller)
    back = (
        shell.ws_url(ref, "models", name, "versions", version)
        if version
        else shell.ws_url(ref, "models", name)
    )
    return RedirectResponse(back, status_code=303)


@router.post(VERSION + "/{action}")
async def archive_version(
    sub: str,
    rg: str,
    ws: str,
    name: str,
    version: str,
    action: str,
    request: Request,
    ctx: Context = Depends(context),
) -> Response:
    """``archive`` or ``restore`` one version."""
    await form_of(request)
    if action not in ("archive", "restore"):
        raise validation_error("action", "archive or restore")
    response: Response = await run_in_threadpool(
        _archive, ctx, sub, rg, ws, name, version, action == "archive"
    )
    return response


@router.post(WS + "/{name}/{action}")
async def archive_model(
    sub: str, rg: str, ws: str, name: str, action: str, request: Request, ctx: Context = Depends(context)
) -> Response:
    """``archive`` or ``restore`` every version of NAME."""
    await form_of(request)
    if action not in ("archive", "restore"):
        raise validation_error("action", "archive or restore")
    response: Response = await run_in_threadpool(_archive, ctx, sub, rg, ws, name, None, action == "archive")
    return response
