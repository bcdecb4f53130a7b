"""The asset pages (issue 28 item 3): Models, Components, Environments and Data share one set of
routes, templates and this module; ``kind_pages(kind, …)`` makes a kind's navigation item and
router (``pages/models.py``, ``components.py``, ``environments.py``, ``data.py`` call it).

Under ``…/{collection}``: the list (each name's latest version; ``?archived=1`` adds the names
whose every version is archived), ``_new`` (register a version: a data asset or a model from
uploaded files or a folder, or from a job's output; an environment or component from YAML in the
editor), ``{name}`` (its latest version), ``{name}/{version}`` (the version: details, files, a
model's MLmodel, spec, build log, inputs and outputs, "used by"), ``…/download`` and
``…/archive`` / ``…/restore``. The studio's own
paths start with ``_``, which no asset name may. Each handler parses, makes one service call
(``services/assets``) and renders; the services decide who may write.
"""

from __future__ import annotations

import datetime as dt
import secrets
import urllib.parse
from typing import Any, Literal

import yaml
from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from cloudlet.api.body_limits import body_limit
from cloudlet.api.deps import Context, context
from cloudlet.domain.access.roles import Access
from cloudlet.domain.assets import assets as rules
from cloudlet.domain.assets.assets import AssetKind
from cloudlet.domain.errors import CloudletError, validation_error
from cloudlet.services.assets import asset_files, asset_writes
from cloudlet.services.assets import assets as asset_service
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.jobs import job_documents
from cloudlet.services.views import assets as asset_views
from cloudlet.studio import shell
from cloudlet.studio.session import PREFIX, StudioRoute, posted
from cloudlet.studio.uploads import json_answer

MAX_BROWSER_FILE = 64 << 20  # one file of a browser's upload; the CLI takes larger ones
VIEWS = {"": "active_only", "1": "all"}  # ?archived=: the list with or without archived names
EXAMPLES: dict[str, str] = {
    "environment": """name: my-env
description: NumPy on Python 3.11
image: python:3.11-slim
conda_file:
  name: my-env
  channels: [conda-forge]
  dependencies:
    - python=3.11
    - pip
    - pip:
        - numpy
""",
    "component": """name: my-component
type: command
display_name: My component
inputs:
  data:
    type: uri_folder
  epochs:
    type: integer
    default: 3
    description: passes over the data
outputs:
  model:
    type: uri_folder
command: python -c "print('${{inputs.epochs}}')" && ls ${{inputs.data}} > ${{outputs.model}}/files.txt
environment: azureml:AzureML-sklearn-1.0-ubuntu20.04-py38-cpu@latest
""",
}
TITLES = {"data": "Data", "model": "Models", "environment": "Environments", "component": "Components"}
ONE = {"data": "data asset", "model": "model", "environment": "environment", "component": "component"}
# The kinds registered from files (or a job's output), and their types as the form offers them: the
# first is the default.
TYPES = {"data": ("uri_folder", "uri_file", "mltable"), "model": rules.MODEL_TYPES}
DEFAULT_TYPE = {kind: types[0] for kind, types in TYPES.items()}
FROM_FILES = tuple(TYPES)


def _when(stamp: float) -> str:
    """A creation time as the pages show it (UTC, to the minute)."""
    return dt.datetime.fromtimestamp(stamp, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _kind_of(asset: Any) -> str:
    """What the list's Type column says of a version."""
    spec = asset.spec or {}
    if asset.kind == "environment":
        return "image" if spec.get("image") else "conda" if spec.get("conda_file") else "pip"
    return str(spec.get("type") or DEFAULT_TYPE.get(asset.kind, ""))


def _tags(text: str) -> dict[str, str]:
    """``k=v, k2=v2`` (a key alone: empty value) as tags."""
    out: dict[str, str] = {}
    for item in text.split(","):
        key, _, value = item.strip().partition("=")
        if key.strip():
            out[key.strip()] = value.strip()
    return out


def kind_pages(kind: AssetKind, label: str, suffix: str, icon: str) -> tuple[shell.NavItem, APIRouter]:
    """The navigation item and the routes of one asset kind."""
    nav = shell.NavItem(suffix, label, suffix, icon)
    router = APIRouter(prefix=PREFIX, route_class=StudioRoute, include_in_schema=False)
    base = "/ws/{sub}/{rg}/{ws}/" + suffix

    def page(
        ctx: Context, ref: WorkspaceRef, ws: Any, template: str, status: int = 200, **values: Any
    ) -> HTMLResponse:
        return shell.render(
            ctx, template, ref, ws, active=nav.key, status=status, kind=kind, suffix=suffix,
            title_of_kind=TITLES[kind], one=ONE[kind], when=_when, kind_of=_kind_of, **values,
        )  # fmt: skip

    @router.get(base, name=f"studio_{suffix}_list")
    def asset_list(
        sub: str, rg: str, ws: str, archived: str = "", q: str = "", ctx: Context = Depends(context)
    ) -> HTMLResponse:
        workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
        rows = asset_service.containers(ctx.session, workspace, kind, VIEWS.get(archived, "all"))
        wanted = q.strip().lower()
        shown = [c for c in rows if wanted in c.name.lower()] if wanted else rows
        return page(ctx, ref, workspace, "assets_list.html", rows=shown, archived=archived == "1", q=q)

    # -- register a version -------------------------------------------------------------------
    def form_page(
        ctx: Context, ref: WorkspaceRef, ws: Any, form: dict[str, str], error: CloudletError | None = None
    ) -> HTMLResponse:
        values = {
            "form": form,
            "error": error,
            "batch": form.get("upload") or secrets.token_hex(16),
            "example": EXAMPLES.get(kind, ""),
            "types": TYPES.get(kind, ()),
            "recent_jobs": asset_files.recent_jobs(ctx.session, ws) if kind in FROM_FILES else [],
            "outputs": asset_files.job_outputs_of(ctx.session, ws, form["job"]) if form.get("job") else {},
        }
        return page(ctx, ref, ws, "asset_new.html", status=400 if error else 200, **values)

    @router.get(base + "/_new", name=f"studio_{suffix}_new")
    def new_form(
        sub: str,
        rg: str,
        ws: str,
        job: str = "",
        output: str = "",
        name: str = "",
        version: str = "",
        ctx: Context = Depends(context),
    ) -> HTMLResponse:
        """The form; ``?name=&version=`` starts from that version (its next one), ``?job=&output=``
        from a job's output."""
        workspace, ref = shell.open_workspace(ctx, sub, rg, ws, Access.WRITE)  # a Reader: 403
        form = {"source": "job" if job else "upload", "job": job, "output": output}
        if name:
            form |= _prefilled(asset_service.get_version(ctx.session, workspace, kind, name, version or None))
        return form_page(ctx, ref, workspace, form)

    @router.post(base + "/_new", name=f"studio_{suffix}_create")
    async def create(
        request: Request, sub: str, rg: str, ws: str, ctx: Context = Depends(context)
    ) -> Response:
        return await posted(request, _create, ctx, sub, rg, ws)

    def _create(ctx: Context, sub: str, rg: str, ws: str, form: dict[str, str]) -> Response:
        workspace, ref = shell.open_workspace(ctx, sub, rg, ws, Access.WRITE)
        try:
            name, version, body = _document(kind, form)
            result = asset_writes.write(
                ctx.session, ref, workspace, kind, name, version, body, ctx.caller, ctx.state.data
            )
        except CloudletError as exc:
            if exc.status not in (400, 409, 413):
                raise
            return form_page(ctx, ref, workspace, form, exc)
        url = shell.ws_url(ref, suffix, result.asset.name, result.asset.version)
        return RedirectResponse(url, status_code=303)

    if kind in FROM_FILES:

        @router.post(base + "/_upload", name=f"studio_{suffix}_upload")
        @body_limit(MAX_BROWSER_FILE)
        async def upload(
            request: Request,
            sub: str,
            rg: str,
            ws: str,
            batch: str,
            path: str,
            ctx: Context = Depends(context),
        ) -> Response:
            """One file of the form's upload (its raw bytes; the page's script sends each file)."""
            body = await request.body()

            def store() -> dict[str, Any]:
                workspace, _ = shell.open_workspace(ctx, sub, rg, ws, Access.WRITE)
                uri = asset_files.upload_file(ctx.session, ctx.state.data, workspace, batch, path, body)
                return {"uri": uri, "size": len(body)}

            return await json_answer(store)

        @router.get(base + "/_outputs", name=f"studio_{suffix}_outputs")
        def outputs(
            sub: str, rg: str, ws: str, job: str = "", ctx: Context = Depends(context)
        ) -> HTMLResponse:
            """The chosen job's outputs, as the form's picker (htmx swaps it in)."""
            workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
            found = asset_files.job_outputs_of(ctx.session, workspace, job.strip()) if job.strip() else {}
            view = shell.WorkspaceView(workspace.id, ref, workspace.location)
            return shell.render_html(
                ctx.request, "asset_outputs.html", ctx.caller, view, outputs=found, chosen="", job=job
            )

    # -- one name, one version ---------------------------------------------------------------
    @router.get(base + "/{name}", name=f"studio_{suffix}_latest")
    def latest(sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)) -> Response:
        workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
        [found] = asset_service.containers(ctx.session, workspace, kind, "all", name)
        return RedirectResponse(shell.ws_url(ref, suffix, name, found.latest.version), status_code=303)

    @router.get(base + "/{name}/{version}", name=f"studio_{suffix}_version")
    def version_page(
        sub: str, rg: str, ws: str, name: str, version: str, ctx: Context = Depends(context)
    ) -> HTMLResponse:
        workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
        view = asset_views.version_view(ctx.session, ctx.state.data, workspace, kind, name, version)
        conda = view.spec.get("conda_file")
        return page(
            ctx,
            ref,
            workspace,
            "asset_page.html",
            view=view,
            asset=view.asset,
            spec=view.spec,
            yaml_text=_as_yaml(view.asset),
            conda_text=yaml.safe_dump(conda, sort_keys=False) if isinstance(conda, dict) else "",
        )

    @router.get(base + "/{name}/{version}/download", name=f"studio_{suffix}_download")
    def download(
        sub: str, rg: str, ws: str, name: str, version: str, file: str = "", ctx: Context = Depends(context)
    ) -> Response:
        workspace, _ = shell.open_workspace(ctx, sub, rg, ws)
        asset = asset_service.get_version(ctx.session, workspace, kind, name, version)
        body, filename = asset_files.download(workspace, asset, ctx.state.data, file or None)
        quoted = urllib.parse.quote(filename, safe="")
        headers = {"Content-Disposition": f"attachment; filename*=UTF-8''{quoted}"}
        return Response(body, media_type="application/octet-stream", headers=headers)

    @router.post(base + "/{name}/{version}/{action}", name=f"studio_{suffix}_archive")
    def archive(
        sub: str,
        rg: str,
        ws: str,
        name: str,
        version: str,
        action: Literal["archive", "restore"],
        ctx: Context = Depends(context),
    ) -> Response:
        """Archive or restore one version: the REST door's ``assets.archive`` (its WRITE check)."""
        workspace, ref = shell.open_workspace(ctx, sub, rg, ws, Access.WRITE)
        asset_service.archive(
            ctx.session, ref, workspace, kind, name, version, action == "archive", ctx.caller
        )
        return RedirectResponse(shell.ws_url(ref, suffix, name, version), status_code=303)

    return nav, router


def _prefilled(asset: Any) -> dict[str, str]:
    """The form's fields for the next version of ASSET: its name and what it says (a data asset's
    type, description and tags; a YAML asset's document without its version)."""
    spec = asset.spec or {}
    if asset.kind not in FROM_FILES:
        doc = {"name": asset.name, **spec}
        return {"yaml": yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)}
    tags = ", ".join(f"{k}={v}" if v else k for k, v in (spec.get("tags") or {}).items())
    return {
        "name": asset.name,
        "type": str(spec.get("type") or DEFAULT_TYPE[asset.kind]),
        "description": str(spec.get("description") or ""),
        "tags": tags,
    }


def _as_yaml(asset: Any) -> str:
    doc = {"name": asset.name, "version": asset.version, **(asset.spec or {})}
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


def _document(kind: AssetKind, form: dict[str, str]) -> tuple[str, str | None, dict[str, Any]]:
    """The form as (name, version or None, the version's document)."""
    if kind in FROM_FILES:
        return _files_document(kind, form)
    doc = job_documents.parse_yaml(form.get("yaml", ""))
    name = form.get("name", "").strip() or str(doc.get("name") or "")
    version = form.get("version", "").strip() or (str(doc["version"]) if doc.get("version") else None)
    if not name:
        raise validation_error("name", f"a {ONE[kind]} needs a name: the YAML's name, or the Name field")
    _check_name(name, version)
    body = {k: v for k, v in doc.items() if k not in ("name", "version", "$schema")}
    return name, version, body


def _check_name(name: str, version: str | None) -> None:
    if not rules.NAME_PATTERN.fullmatch(name):
        raise validation_error("name", rules.NAME_RULE)
    if version is not None and not rules.VERSION_PATTERN.fullmatch(version):
        raise validation_error("version", rules.VERSION_RULE)


def _files_document(kind: AssetKind, form: dict[str, str]) -> tuple[str, str | None, dict[str, Any]]:
    """A data asset or model: its files uploaded by the form, or a job's output (a path inside it
    as Azure names one: ``azureml://jobs/<job>/outputs/<output>/paths/<path>``)."""
    name, version = form.get("name", "").strip(), form.get("version", "").strip() or None
    if not name:
        raise validation_error("name", f"a {ONE[kind]} needs a name")
    _check_name(name, version)
    of_type = form.get("type") or DEFAULT_TYPE[kind]
    if form.get("source") == "job":
        job, output = form.get("job", "").strip(), form.get("output", "").strip()
        if not job or not output:
            raise validation_error("output", "choose a job and one of its outputs")
        inner = form.get("output_path", "").strip().strip("/")
        path = f"azureml://jobs/{job}/outputs/{output}" + (f"/paths/{inner}" if inner else "")
    else:
        if not form.get("upload") or not form.get("uploaded"):
            raise validation_error("upload", "choose files or a folder to upload first")
        if of_type == "uri_file" and form.get("count", "1") != "1":
            raise validation_error("type", "a uri_file is one file: upload one file, or choose uri_folder")
        single = form.get("uploaded") if of_type == "uri_file" else None
        path = asset_files.upload_uri(form["upload"], single)
    body: dict[str, Any] = {"type": of_type, "path": path, "tags": _tags(form.get("tags", ""))}
    if form.get("description", "").strip():
        body["description"] = form["description"].strip()
    return name, version, body
