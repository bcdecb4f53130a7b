"""Jobs: the list (server-side filters, sorts and pages from ``services.jobs.job_search``, its state in
the URL), cancel one or many, resubmit. Submitting, cloning and a job's YAML are in
``job_forms`` (their routes are added to this router). A job's own page (``…/jobs/{name}``) is
another module's.

Every write is one service call that commits; the role check is the services' own (a Reader's
POST is their 403, shown as the studio's error page), the page only hides what they would refuse.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from cloudlet.api.deps import Context, context
from cloudlet.domain.access.roles import Access
from cloudlet.domain.errors import validation_error
from cloudlet.domain.jobs.job_spec import JOB_NAME_PATTERN
from cloudlet.domain.jobs.job_status import FINAL
from cloudlet.services.compute import computes
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.jobs import job_cancel, job_documents, job_search, job_wait
from cloudlet.services.jobs import jobs as job_service
from cloudlet.studio import job_list, shell
from cloudlet.studio.pages import job_forms
from cloudlet.studio.session import PREFIX, StudioRoute, form_lists_of

router = APIRouter(prefix=PREFIX, route_class=StudioRoute, include_in_schema=False)
NAV = shell.NavItem("jobs", "Jobs", "jobs", "jobs")
WS = "/ws/{sub}/{rg}/{ws}"
FINAL_STATUSES = frozenset(s.value for s in FINAL)
MAX_BULK = 500


def _job_name(name: str) -> str:
    if not JOB_NAME_PATTERN.fullmatch(name):
        raise validation_error("name", "not a job name")
    return name


def back_to(ref: WorkspaceRef, target: str | None) -> str:
    """Where a write goes back to: a page of this workspace (a list with its filters, a job's
    page), never elsewhere; the list by default."""
    base = shell.ws_url(ref)
    if target and target.startswith(base) and "//" not in target and "\\" not in target:
        return target
    return shell.ws_url(ref, "jobs")


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "—"
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%d %H:%M")  # UTC, as the filter dates


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes}m" if hours else f"{minutes}m {secs}s" if minutes else f"{secs}s"


# -- the list ------------------------------------------------------------------------------------
def _list_values(ctx: Context, workspace: Any, ref: WorkspaceRef) -> dict[str, Any]:
    view = job_list.view_of(list(ctx.request.query_params.multi_items()))
    page = job_search.search_jobs(ctx.session, workspace, job_list.query_of(view))
    base = shell.ws_url(ref, "jobs")
    waiting = job_wait.waiting_of_rows(ctx.session, workspace.id, page.jobs)  # one queue read per compute
    rows = [
        {
            **job_search.list_columns(row),
            "final": row.status in FINAL_STATUSES,
            "waiting": waiting.get(row.id),
        }
        for row in page.jobs
    ]
    return {
        "view": view,
        "rows": rows,
        "count": page.count
        if page.count is not None or page.next_token
        else len(rows),  # a last page counts itself
        "count_capped": page.count_capped,
        "page_full": len(rows),
        "base": base,
        "here": str(ctx.request.url.path) + (f"?{ctx.request.url.query}" if ctx.request.url.query else ""),
        "next_url": view.url(base, after=page.next_token) if page.next_token else None,
        "first_url": view.url(base, after="") if view.after else None,
        "statuses": job_list.STATUSES,
        "kinds": job_list.KINDS,
        "since_labels": job_list.SINCE_LABELS,
        "page_sizes": job_list.PAGE_SIZES,
        "when": _when,
        "duration": _duration,
    }


@router.get(WS + "/jobs")
def jobs_list(sub: str, rg: str, ws: str, ctx: Context = Depends(context)) -> HTMLResponse:
    """The list; an htmx request (a filter changed, a sort, a page) gets the results part only."""
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    values = _list_values(ctx, workspace, ref)
    if ctx.request.headers.get("hx-request") and ctx.request.headers.get("hx-target") == "jobs-results":
        ws_view = shell.WorkspaceView(workspace.id, ref, workspace.location)
        return shell.render_html(ctx.request, "jobs_results.html", ctx.caller, ws_view, **values)
    compute_names = [c.name for c in computes.list_all(ctx.session, workspace)]
    return shell.render(
        ctx, "jobs_list.html", ref, workspace, active=NAV.key, compute_names=compute_names, **values
    )


# -- cancel, bulk cancel, resubmit ------------------------------------------------------------------
def _cancel(ctx: Context, sub: str, rg: str, ws: str, name: str) -> WorkspaceRef:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws, Access.WRITE)
    job_cancel.cancel(ctx.session, workspace, name)
    return ref


@router.post(WS + "/jobs/cancel")
async def cancel_selected(
    sub: str, rg: str, ws: str, request: Request, ctx: Context = Depends(context)
) -> Response:
    """Cancel the jobs ticked in the list (form fields ``name``), in one transaction."""
    form = await form_lists_of(request)
    names = [_job_name(n) for n in form.get("name", [])][:MAX_BULK]
    if not names:
        raise validation_error("name", "no job was selected: tick the jobs to cancel")

    def cancel_all() -> WorkspaceRef:
        workspace, ref = shell.open_workspace(ctx, sub, rg, ws, Access.WRITE)
        job_cancel.cancel_many(ctx.session, workspace, names)
        return ref

    ref = await run_in_threadpool(cancel_all)
    return RedirectResponse(back_to(ref, (form.get("next") or [""])[0]), status_code=303)


@router.post(WS + "/jobs/{name}/cancel")
async def cancel_one(
    sub: str, rg: str, ws: str, name: str, request: Request, ctx: Context = Depends(context)
) -> Response:
    form = await form_lists_of(request)
    ref = await run_in_threadpool(_cancel, ctx, sub, rg, ws, _job_name(name))
    return RedirectResponse(back_to(ref, (form.get("next") or [""])[0]), status_code=303)


@router.post(WS + "/jobs/{name}/resubmit")
async def resubmit(sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)) -> Response:
    """The same spec under a new name, one click; then the new job's page."""

    def document() -> dict[str, Any]:
        with ctx.state.read_sessions() as session:  # closed before the batcher writes
            _, job = job_service.readable(session, WorkspaceRef(sub, rg, ws), ctx.caller, _job_name(name))
            return job_documents.resubmission(job)

    doc = await run_in_threadpool(document)
    new_name = await job_forms.submit_document(ctx, WorkspaceRef(sub, rg, ws), doc, None)
    return RedirectResponse(shell.ws_url(WorkspaceRef(sub, rg, ws), "jobs", new_name), status_code=303)


router.routes.extend(job_forms.router.routes)
