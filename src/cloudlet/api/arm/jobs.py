"""Jobs through the ARM facade (azure-ai-ml's ``jobs.create_or_update``, ``get``, ``list``,
``begin_cancel``): a thin translation (``domain.arm_jobs``) over the same services as the native
job routes (``services.jobs``: prepare, submission through the dispatch batcher, list pages,
cancel), so every rule — quota, placement, roles, names — is the native one."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Body, Depends, Path, Query, Request, Response
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from cloudlet.api.arm import WS, https_base
from cloudlet.api.deps import AppState, Context, app_state, context, json_response
from cloudlet.api.native import jobs as native_jobs
from cloudlet.api.openapi import json_body
from cloudlet.api.routing import UserRoute
from cloudlet.domain import arm_jobs
from cloudlet.domain.errors import not_found
from cloudlet.domain.job_spec import JOB_NAME_PATTERN
from cloudlet.domain.job_status import FINAL, JobStatus
from cloudlet.domain.roles import Access
from cloudlet.services import codes, dispatch, workspaces
from cloudlet.services import jobs as job_service
from cloudlet.services.context import Caller, WorkspaceRef
from cloudlet.store.schema import Job, Workspace

JobName = Annotated[str, Path(pattern=JOB_NAME_PATTERN.pattern, max_length=255)]
# The SDK's ARM body, validated by domain.arm_jobs and then as any job document.
ARM_JOB = json_body(
    {
        "type": "object",
        "description": "a command job as azure-ai-ml sends it (domain/arm_jobs.py)",
        "required": ["properties"],
        "properties": {
            "properties": {
                "type": "object",
                "required": ["jobType", "command"],
                "properties": {
                    "jobType": {"type": "string", "enum": [arm_jobs.JOB_TYPE]},
                    "command": {"type": "string"},
                    "codeId": {"type": "string"},
                    "computeId": {"type": "string"},
                    "environmentId": {"type": "string"},
                    "displayName": {"type": "string"},
                    "experimentName": {"type": "string"},
                    "description": {"type": "string"},
                    "inputs": {"type": "object"},
                    "outputs": {"type": "object"},
                    "environmentVariables": {"type": "object", "additionalProperties": {"type": "string"}},
                    "tags": {"type": "object", "additionalProperties": {"type": "string"}},
                    "resources": {"type": "object"},
                    "distribution": {"type": "object"},
                    "limits": {"type": "object"},
                },
            }
        },
    }
)

router = APIRouter(tags=["arm-jobs"], route_class=UserRoute)


def code_reference(session: Session, workspace: Workspace, code_id: str) -> str:
    """The document's ``code`` (``codes/<sha256>``) for an ARM code version id."""
    return codes.snapshot_for(session, workspace, code_id)


def _document(state: AppState, ref: WorkspaceRef, caller: Caller, body: Any, name: str) -> dict[str, Any]:
    """The job document for the SDK's body; a code id is looked up in the store (a read)."""
    with state.read_sessions() as session:

        def code(code_id: str) -> str:
            workspace = workspaces.resolve(session, ref, caller, Access.WRITE)
            return code_reference(session, workspace, code_id)

        return arm_jobs.from_arm(body, name, arm_jobs.Refs(code=code))


@router.put(WS + "/jobs/{name}", status_code=201, openapi_extra=ARM_JOB)
async def create_job(
    sub: str,
    rg: str,
    ws: str,
    name: JobName,
    request: Request,
    body: dict[str, Any] = Body(include_in_schema=False),
    state: AppState = Depends(app_state),
) -> Response:
    caller: Caller = request.state.caller  # authenticated before the body was read
    ref = WorkspaceRef(sub, rg, ws)
    if _code_id(body) is None:  # nothing to look up: pure, on the event loop (no thread-pool hop)
        doc = arm_jobs.from_arm(body, name, arm_jobs.Refs(code=_no_store))
    else:
        doc = await run_in_threadpool(_document, state, ref, caller, body, name)
    prepared = job_service.prepare(doc, name)
    job = await state.batcher.apply(job_service.submission(ref, name, prepared, caller, state.data))
    view = native_jobs.render(job, ref, [], https_base(request, state))
    return json_response(arm_jobs.to_arm(view, ref.arm_id, _code_id(body)), 201)


@router.get(WS + "/jobs/{name}")
def show_job(sub: str, rg: str, ws: str, name: JobName, ctx: Context = Depends(context)) -> Response:
    ref = WorkspaceRef(sub, rg, ws)
    _, job = workspaces.resolve_child(ctx.session, ref, ctx.caller, Access.READ, Job, name)
    if job is None:
        raise not_found("Job", name)
    return json_response(_view(ctx, ref, job))


@router.get(WS + "/jobs")
def list_jobs(
    sub: str,
    rg: str,
    ws: str,
    top: Annotated[int, Query(alias="$top", ge=1, le=job_service.MAX_PAGE)] = job_service.DEFAULT_PAGE,
    skip_token: Annotated[str | None, Query(alias="$skipToken", max_length=512)] = None,
    ctx: Context = Depends(context),
) -> Response:
    """Newest first, ``$top`` at a time, ``nextLink`` to the next page (the SDK's pager follows it).
    ``listViewType`` and the other filters the SDK sends are informational: nothing is archived."""
    ref = WorkspaceRef(sub, rg, ws)
    workspace = workspaces.resolve(ctx.session, ref, ctx.caller, Access.READ)
    page = job_service.list_jobs(ctx.session, workspace, None, None, top, skip_token)
    arm_id, base = ref.arm_id, https_base(ctx.request, ctx.state)
    body: dict[str, Any] = {
        "value": [arm_jobs.to_arm(native_jobs.render(j, ref, [], base), arm_id) for j in page.jobs]
    }
    if page.next_token is not None:
        query = {"$top": top, "$skipToken": page.next_token}
        body["nextLink"] = f"{str(ctx.request.url).split('?', 1)[0]}?{urlencode(query)}"
    return json_response(body)


@router.post(WS + "/jobs/{name}/cancel", status_code=202)
def cancel_job(sub: str, rg: str, ws: str, name: JobName, ctx: Context = Depends(context)) -> Response:
    """202 with ``Azure-AsyncOperation`` (``cancelStatus``: in progress until the job has ended)
    and ``Location`` (the job, which the SDK reads when the operation succeeded)."""
    ref = WorkspaceRef(sub, rg, ws)
    workspace = workspaces.resolve(ctx.session, ref, ctx.caller, Access.WRITE)
    job = job_service.get(ctx.session, workspace, name)
    wake = dispatch.cancel_job(ctx.session, job)
    ctx.commit(wake, rescale=True)
    url = f"{https_base(ctx.request, ctx.state)}{ref.arm_id}/jobs/{name}"
    headers = {"Azure-AsyncOperation": f"{url}/cancelStatus", "Location": url, "Retry-After": "1"}
    return Response(status_code=202, headers=headers)


@router.get(WS + "/jobs/{name}/cancelStatus")
def cancel_status(sub: str, rg: str, ws: str, name: JobName, ctx: Context = Depends(context)) -> Response:
    """The cancel's long-running operation: InProgress until the job has ended (its processes are
    gone), then Succeeded."""
    ref = WorkspaceRef(sub, rg, ws)
    workspace = workspaces.resolve(ctx.session, ref, ctx.caller, Access.READ)
    job = job_service.get(ctx.session, workspace, name)
    status = "Succeeded" if JobStatus(job.status) in FINAL else "InProgress"
    return json_response({"status": status}, headers={"Retry-After": "1"})


def _view(ctx: Context, ref: WorkspaceRef, job: Job) -> dict[str, Any]:
    base = https_base(ctx.request, ctx.state)
    view = native_jobs.render(job, ref, job_service.runs_of(ctx.session, job), base)
    return arm_jobs.to_arm(view, ref.arm_id)


def _no_store(code_id: str) -> str:
    raise AssertionError(f"a body without a codeId asked for code {code_id!r}")  # from_arm reads codeId only


def _code_id(body: Any) -> str | None:
    props = body.get("properties") if isinstance(body, dict) else None
    code = props.get("codeId") if isinstance(props, dict) else None
    return str(code) if code else None
