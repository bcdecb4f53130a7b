"""Creating an online endpoint (a small form, or its CLI v2 YAML) and a deployment (its CLI v2 YAML,
with the local ``code`` and ``model`` folders uploaded as archives first, as the job submit form
does for ``code``: ``…/jobs/_new/code`` stores each as a ``codes/<sha256>`` snapshot).

Both end in the REST door's use cases (``online_writes.put_endpoint`` / ``put_deployment``), never
over an existing endpoint or deployment; a refusal is shown at the form with its field.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from cloudlet.api.deps import Context, context
from cloudlet.domain.access.roles import Access
from cloudlet.domain.endpoints import online_endpoints as rules
from cloudlet.domain.errors import CloudletError, conflict, validation_error
from cloudlet.services.endpoints import online_endpoints as online
from cloudlet.services.endpoints import online_writes as writes
from cloudlet.services.jobs import job_documents
from cloudlet.studio import shell
from cloudlet.studio.session import StudioRoute, posted

router = APIRouter(route_class=StudioRoute, include_in_schema=False)  # under endpoints.py's prefix
WS = "/ws/{sub}/{rg}/{ws}/endpoints"
ACTIVE = "endpoints"
ENDPOINT_EXAMPLE = """$schema: https://azuremlschemas.azureedge.net/latest/managedOnlineEndpoint.schema.json
name: my-endpoint
auth_mode: key
description: ""
"""
DEPLOYMENT_EXAMPLE = """$schema: https://azuremlschemas.azureedge.net/latest/managedOnlineDeployment.schema.json
name: blue
endpoint_name: {endpoint}
model:
  path: ./model
code_configuration:
  code: ./onlinescoring
  scoring_script: score.py
environment: sklearn-inference
instance_type: Standard_DS3_v2
instance_count: 1
"""


def _is_local(value: Any) -> bool:
    return isinstance(value, str) and not value.startswith(rules.MODEL_PREFIXES)


def with_uploads(doc: dict[str, Any], code: str | None, model: str | None) -> dict[str, Any]:
    """DOC with its local ``code_configuration.code`` and ``model`` (a path, or ``{path: …}``)
    replaced by the uploaded snapshots, as the CLI replaces them by its uploads."""
    doc = dict(doc)
    config = doc.get("code_configuration")
    if isinstance(config, dict) and _is_local(config.get("code")):
        if not code:
            raise validation_error(
                "code_configuration.code", "the code is a local folder: upload it as a .zip or .tar.gz"
            )
        doc["code_configuration"] = {**config, "code": code}
    found = doc.get("model")
    local = found.get("path") if isinstance(found, dict) else found
    if _is_local(local):
        if not model:
            raise validation_error("model", "the model is a local folder: upload it as a .zip or .tar.gz")
        doc["model"] = model
    return doc


# -- a new endpoint ---------------------------------------------------------------------------
def _endpoint_form(
    ctx: Context, sub: str, rg: str, ws: str, form: dict[str, str], error: CloudletError | None = None
) -> HTMLResponse:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    text = form.get("yaml", "")
    return shell.render(
        ctx,
        "endpoint_new.html",
        ref,
        workspace,
        active=ACTIVE,
        form=form,
        **shell.editor_error(text, error),
        example=ENDPOINT_EXAMPLE,
        auth_modes=rules.AUTH_MODES,
        name_rule=rules.ENDPOINT_NAME_RULE,
    )


@router.get(WS + "/_new")
def new_endpoint(sub: str, rg: str, ws: str, ctx: Context = Depends(context)) -> HTMLResponse:
    return _endpoint_form(ctx, sub, rg, ws, {"auth_mode": "key"})


def endpoint_document(form: dict[str, str]) -> tuple[str, dict[str, Any]]:
    """The endpoint's name and document: the YAML when given (the name field overrides its
    ``name``), else the form's fields."""
    if form.get("mode") == "yaml":
        doc = job_documents.parse_yaml(form.get("yaml", ""))
        name = form.get("name", "").strip() or str(doc.get("name") or "")
    else:
        name = form.get("name", "").strip()
        doc = {"auth_mode": form.get("auth_mode") or "key"}
        if form.get("description", "").strip():
            doc["description"] = form["description"].strip()
    if not rules.ENDPOINT_NAME.fullmatch(name):
        raise validation_error("name", f"'{name}' is not an endpoint name: {rules.ENDPOINT_NAME_RULE}")
    return name, {**{k: v for k, v in doc.items() if k != "$schema"}, "name": name}


def _create_endpoint(ctx: Context, sub: str, rg: str, ws: str, form: dict[str, str]) -> Response:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws, Access.WRITE)
    try:
        name, doc = endpoint_document(form)
        if any(r.name == name for r in online.list_endpoints(ctx.session, workspace)):
            raise conflict("Conflict", f"an endpoint '{name}' exists already in this workspace", "name")
        writes.put_endpoint(ctx.session, ref, workspace, name, doc, ctx.caller.name)
    except CloudletError as exc:
        if exc.status in (401, 403, 404):
            raise
        return _endpoint_form(ctx, sub, rg, ws, form, exc)
    return RedirectResponse(shell.ws_url(ref, "endpoints", name), 303)


@router.post(WS + "/_new")
async def create_endpoint(
    request: Request, sub: str, rg: str, ws: str, ctx: Context = Depends(context)
) -> Response:
    return await posted(request, _create_endpoint, ctx, sub, rg, ws)


# -- a new deployment -------------------------------------------------------------------------
def _deployment_form(
    ctx: Context,
    sub: str,
    rg: str,
    ws: str,
    name: str,
    form: dict[str, str],
    error: CloudletError | None = None,
) -> HTMLResponse:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    row = online.get_endpoint(ctx.session, workspace, name)
    text = form.get("yaml", DEPLOYMENT_EXAMPLE.format(endpoint=row.name))
    return shell.render(
        ctx,
        "deployment_new.html",
        ref,
        workspace,
        active=ACTIVE,
        endpoint_name=row.name,
        form=form,
        text=text,
        **shell.editor_error(text, error),
        upload_url=shell.code_upload_url(ref),
    )


@router.get(WS + "/{name}/deployments/_new")
def new_deployment(sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)) -> HTMLResponse:
    return _deployment_form(ctx, sub, rg, ws, name, {})


def deployment_document(endpoint: str, form: dict[str, str]) -> dict[str, Any]:
    """The deployment the form describes: its YAML with the uploads in place, or (the small form)
    the uploaded code and model, a scoring script, an environment, a size and an instance count."""
    code, model = form.get("code", "").strip() or None, form.get("model", "").strip() or None
    if form.get("mode", "yaml") == "yaml":
        return with_uploads(job_documents.parse_yaml(form.get("yaml", "")), code, model)
    if model is None:
        raise validation_error("model", "choose the model folder's archive")
    doc: dict[str, Any] = {
        "endpoint_name": endpoint,
        "model": model,
        "instance_type": form.get("instance_type", "").strip(),
        "instance_count": _count(form.get("instance_count", "1")),
    }
    if code is not None:
        doc["code_configuration"] = {"code": code, "scoring_script": form.get("scoring_script", "").strip()}
    if form.get("environment", "").strip():
        doc["environment"] = form["environment"].strip()
    return doc


def _count(raw: str) -> int:
    try:
        return int(raw.strip() or "1")
    except ValueError:
        raise validation_error("instance_count", "the instance count is a whole number") from None


def _create_deployment(ctx: Context, sub: str, rg: str, ws: str, name: str, form: dict[str, str]) -> Response:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws, Access.WRITE)
    row = online.get_endpoint(ctx.session, workspace, name)
    try:
        doc = deployment_document(row.name, form)
        chosen = form.get("name", "").strip() or str(doc.get("name") or "")
        if not rules.DEPLOYMENT_NAME.fullmatch(chosen):
            raise validation_error("name", f"'{chosen}' is not a deployment name: {rules.ENDPOINT_NAME_RULE}")
        if any(d.name == chosen for d in online.deployments_of(ctx.session, row)):
            raise conflict("Conflict", f"endpoint '{name}' has a deployment '{chosen}' already", "name")
        doc = {k: v for k, v in doc.items() if k != "$schema"}
        writes.put_deployment(
            ctx.session,
            ref,
            workspace,
            row,
            chosen,
            {**doc, "name": chosen},
            ctx.caller.name,
            data=ctx.state.data,
        )
    except CloudletError as exc:
        if exc.status in (401, 403, 404):
            raise
        return _deployment_form(ctx, sub, rg, ws, name, form, exc)
    return RedirectResponse(shell.ws_url(ref, "endpoints", name), 303)


@router.post(WS + "/{name}/deployments/_new")
async def create_deployment(
    request: Request, sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)
) -> Response:
    return await posted(request, _create_deployment, ctx, sub, rg, ws, name)
