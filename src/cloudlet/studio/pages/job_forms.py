"""Submitting a job from YAML (pasted, or a .yml file read into the editor), cloning one (its YAML
in the editor, edited, submitted under a new name) and a job's YAML tab.

A submission goes the REST door's way: ``jobs.prepare`` (pure validation), then
``jobs.submission`` through the dispatch batcher, which commits. A local ``code:`` path needs its
folder as an archive, uploaded first (``…/jobs/_new/code``, as the CLI uploads a snapshot before it
submits). A validation error is shown at its field: the message with the field's path beside the
editor, and the line of that key marked in it (``job_documents.line_of``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from cloudlet.api.body_limits import body_limit
from cloudlet.api.deps import Context, context
from cloudlet.domain.access.roles import Access
from cloudlet.domain.errors import CloudletError, validation_error
from cloudlet.domain.jobs.job_spec import JOB_NAME_PATTERN
from cloudlet.services.assets import code_archives
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.jobs import job_documents
from cloudlet.services.jobs import jobs as job_service
from cloudlet.studio import shell
from cloudlet.studio.session import PREFIX, StudioRoute, form_of
from cloudlet.studio.uploads import json_answer

router = APIRouter(prefix=PREFIX, route_class=StudioRoute, include_in_schema=False)
WS = "/ws/{sub}/{rg}/{ws}"
ACTIVE = "jobs"
NEW = shell.JOB_FORM  # the old …/jobs/new link reaches the form while no job is named "new"
MAX_CODE_ARCHIVE = 64 << 20  # a browser's upload of one code folder; the CLI takes larger ones


async def submit_document(ctx: Context, ref: WorkspaceRef, doc: dict[str, Any], chosen: str | None) -> str:
    """Submit DOC (a parsed job document) as the REST door does; the new job's name."""
    named, name = job_documents.named(doc, chosen)
    prepared = await run_in_threadpool(job_service.prepare, named, name)  # pure: no store session
    state = ctx.state
    await state.batcher.apply(job_service.submission(ref, name, prepared, ctx.caller, state.data))
    return name


def _form_page(
    ctx: Context,
    sub: str,
    rg: str,
    ws: str,
    *,
    text: str,
    name: str,
    source: str | None = None,
    code: str = "",
    error: CloudletError | None = None,
) -> HTMLResponse:
    """The submit (or clone) form: TEXT in the editor; ERROR shown at its field."""
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    action = shell.ws_url(ref, "jobs", source, "clone") if source else shell.ws_url(ref, "jobs", NEW)
    return shell.render(
        ctx,
        "jobs_submit.html",
        ref,
        workspace,
        active=ACTIVE,
        text=text,
        name=name,
        source=source,
        code=code,
        **shell.editor_error(text, error),
        action=action,
        upload_url=shell.ws_url(ref, "jobs", NEW, "code"),
        title=f"Clone {source}" if source else "Submit a job",
    )


async def _submit_form(
    request: Request, ctx: Context, sub: str, rg: str, ws: str, source: str | None
) -> Response:
    form = await form_of(request)
    text, chosen, code = form.get("yaml", ""), form.get("name", "").strip(), form.get("code", "").strip()
    ref = WorkspaceRef(sub, rg, ws)
    try:
        doc = job_documents.with_code(job_documents.parse_yaml(text), code or None)
        name = await submit_document(ctx, ref, doc, chosen)
    except CloudletError as exc:
        if exc.status in (401, 403):  # not the form's fault: the studio's error page
            raise
        error = exc
        return await run_in_threadpool(
            lambda: _form_page(
                ctx, sub, rg, ws, text=text, name=chosen, source=source, code=code, error=error
            )
        )
    return RedirectResponse(shell.ws_url(ref, "jobs", name), status_code=303)


@router.get(WS + "/jobs/" + NEW)
def new_job(sub: str, rg: str, ws: str, ctx: Context = Depends(context)) -> HTMLResponse:
    return _form_page(ctx, sub, rg, ws, text="", name="")


@router.post(WS + "/jobs/" + NEW)
async def submit_new(
    sub: str, rg: str, ws: str, request: Request, ctx: Context = Depends(context)
) -> Response:
    return await _submit_form(request, ctx, sub, rg, ws, None)


@router.post(WS + "/jobs/" + NEW + "/code")
@body_limit(MAX_CODE_ARCHIVE)
async def upload_code(
    sub: str, rg: str, ws: str, request: Request, ctx: Context = Depends(context)
) -> Response:
    """The raw bytes of a .zip or .tar.gz (sent by the form's script): stored as a code snapshot;
    answers ``{"code": "codes/<sha256>"}`` for the form's ``code`` field."""
    archive = await request.body()

    def store() -> dict[str, Any]:
        workspace, _ = shell.open_workspace(ctx, sub, rg, ws, Access.WRITE)
        code = code_archives.store(ctx.session, ctx.state.data, workspace, archive)
        return {"code": code, "size": len(archive)}

    return await json_answer(store)


def _job_name(name: str) -> str:
    if not JOB_NAME_PATTERN.fullmatch(name):
        raise validation_error("name", "not a job name")
    return name


@router.get(WS + "/jobs/{name}/clone")
def clone(sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)) -> HTMLResponse:
    """JOB's YAML in the editor, without its name, and a new name to submit it under."""
    _, job = job_service.readable(ctx.session, WorkspaceRef(sub, rg, ws), ctx.caller, _job_name(name))
    text = job_documents.as_yaml(job, with_name=False)
    return _form_page(ctx, sub, rg, ws, text=text, name=job_documents.new_name(), source=job.name)


@router.post(WS + "/jobs/{name}/clone")
async def submit_clone(
    sub: str, rg: str, ws: str, name: str, request: Request, ctx: Context = Depends(context)
) -> Response:
    return await _submit_form(request, ctx, sub, rg, ws, _job_name(name))


@router.get(WS + "/jobs/{name}/yaml")
def job_yaml(sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)) -> HTMLResponse:
    """The job's YAML tab: its stored document as the CLI v2 YAML, read-only."""
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    job = job_service.get(ctx.session, workspace, _job_name(name))
    return shell.render(
        ctx, "jobs_yaml.html", ref, workspace, active=ACTIVE, job=job, text=job_documents.as_yaml(job)
    )
