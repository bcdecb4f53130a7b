"""Jobs through the ARM facade (azure-ai-ml's ``jobs.create_or_update``, ``get``, ``list``,
``begin_cancel``): a thin translation (``api.arm.wire.arm_jobs`` for command jobs,
``api.arm.wire.arm_pipeline_jobs`` for pipelines and sweeps, by ``jobType``) over the same services as
the native job routes (``services.jobs.jobs``: prepare, submission through the dispatch batcher, list
pages, cancel), so every rule — quota, placement, roles, names — is the native one. A pipeline's
``x-azureml-token`` is checked (``check_azureml_token``); a sweep's view names its best trial."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Body, Depends, Path, Query, Request, Response
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from cloudlet.api.arm import WS, ArmWorkspace, arm_errors, https_base
from cloudlet.api.arm.wire import arm_batch, arm_jobs, arm_parallel, arm_pipeline_jobs
from cloudlet.api.deps import AML_RESOURCE_ID, AppState, Context, app_state, context, json_response
from cloudlet.api.openapi import json_body
from cloudlet.api.routing import UserRoute
from cloudlet.domain.access.roles import Access
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs.job_spec import JOB_NAME_PATTERN
from cloudlet.domain.jobs.job_status import FINAL, JobStatus
from cloudlet.services.access import identity, workspaces
from cloudlet.services.assets import codes
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.services.jobs import job_cancel
from cloudlet.services.jobs import jobs as job_service
from cloudlet.services.views import jobs as native_jobs

if TYPE_CHECKING:
    from cloudlet.store.schema import Job, Workspace


JobName = Annotated[str, Path(pattern=JOB_NAME_PATTERN.pattern, max_length=255)]
# The SDK's ARM body, validated by api.arm.wire.arm_jobs and then as any job document.
ARM_JOB = json_body(
    {
        "type": "object",
        "description": "a command, pipeline or sweep job as azure-ai-ml sends it (api/arm/wire/arm_*jobs.py)",
        "required": ["properties"],
        "properties": {
            "properties": {
                "type": "object",
                "required": ["jobType"],
                "properties": {
                    "jobType": {
                        "type": "string",
                        "enum": [arm_jobs.JOB_TYPE, arm_pipeline_jobs.PIPELINE, arm_pipeline_jobs.SWEEP],
                    },
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
                    "jobs": {"type": "object", "description": "a pipeline's steps (jobType Pipeline)"},
                    "settings": {"type": "object"},
                    "trial": {"type": "object", "description": "a sweep's trial (jobType Sweep)"},
                    "searchSpace": {"type": "object"},
                    "samplingAlgorithm": {"type": "object"},
                    "objective": {"type": "object"},
                    "earlyTermination": {"type": "object"},
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

        return job_document_from_arm(body, name, arm_jobs.Refs(code=code))


def job_document_from_arm(body: Any, name: str, refs: arm_jobs.Refs) -> dict[str, Any]:
    """The document for a command, pipeline or sweep body (``jobType``)."""
    kind = arm_pipeline_jobs.job_type(body)
    if kind == arm_pipeline_jobs.PIPELINE:
        return arm_pipeline_jobs.pipeline_from_arm(body, name, refs)
    if kind == arm_pipeline_jobs.SWEEP:
        return arm_pipeline_jobs.sweep_from_arm(body, name, refs)
    return arm_jobs.from_arm(body, name, refs)


def check_azureml_token(token: str | None, caller: Caller, secret: str) -> None:
    """The ``x-azureml-token`` the SDK sends with a pipeline (a JWT for ``aml_resource_id``, which
    it decoded itself before sending): when present it must be this server's, for the Azure ML
    audience, and the caller's own (Azure runs the steps on the submitter's behalf with it)."""
    if token is None:
        return
    try:
        claims = identity.verify_jwt(token, secret, frozenset({AML_RESOURCE_ID}))
    except CloudletError as exc:
        raise dataclasses.replace(
            exc, message=f"x-azureml-token: {exc.message}", target="x-azureml-token"
        ) from None
    if claims.principal_id != caller.principal_id:
        raise CloudletError(
            "InvalidAzureMLToken",
            "the x-azureml-token header belongs to another principal than the request's credential; "
            "send a token from the same credential (the SDK does so by itself)",
            "x-azureml-token",
            401,
        )


@router.put(WS + "/jobs/{name}", status_code=201, openapi_extra=ARM_JOB)
async def create_job(
    ref: ArmWorkspace,
    name: JobName,
    request: Request,
    body: dict[str, Any] = Body(include_in_schema=False),
    state: AppState = Depends(app_state),
) -> Response:
    caller: Caller = request.state.caller  # authenticated before the body was read
    if arm_pipeline_jobs.job_type(body) == arm_pipeline_jobs.PIPELINE:
        check_azureml_token(request.headers.get("x-azureml-token"), caller, state.token_secret)
    if _code_id(body) is None and not arm_parallel.has_task_code(body):
        # nothing to look up: pure, on the event loop (no thread-pool hop)
        doc = job_document_from_arm(body, name, arm_jobs.Refs(code=_no_store))
    else:
        doc = await run_in_threadpool(_document, state, ref, caller, body, name)
    with arm_errors(arm_pipeline_jobs.arm_target):  # a step's field as the body names it
        prepared = job_service.prepare(doc, name)
        job = await state.batcher.apply(job_service.submission(ref, name, prepared, caller, state.data))
    view = native_jobs.render(job, ref, [], https_base(request, state), state.endpoint)
    return json_response(to_arm(view, ref.arm_id, _code_id(body)), 201)


@router.get(WS + "/jobs/{name}")
def show_job(sub: str, rg: str, ws: str, name: JobName, ctx: Context = Depends(context)) -> Response:
    ref = WorkspaceRef(sub, rg, ws)
    _, job = job_service.readable(ctx.session, ref, ctx.caller, name)
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
        "value": [
            to_arm(v, arm_id)
            for v in native_jobs.render_page(
                ctx.session, ref, workspace.id, page.jobs, base, ctx.state.endpoint
            )
        ]
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
    job_cancel.cancel(ctx.session, workspace, name)
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
    view = native_jobs.view(ctx.session, ref, job, https_base(ctx.request, ctx.state), ctx.state.endpoint)
    arm = to_arm(view, ref.arm_id)
    best = (view.get("sweep") or {}).get("best_trial")
    if best is not None:  # the best trial, as Azure's sweep properties name it (jobs.download reads it)
        arm["properties"]["properties"].update(
            {"best_child_run_id": best["name"], "score": str(best["metric"])}
        )
    return arm


def to_arm(view: dict[str, Any], workspace_id: str, code_id: str | None = None) -> dict[str, Any]:
    """The ARM resource for a job's native view, by its type."""
    if view.get("type") == "pipeline":
        return arm_pipeline_jobs.pipeline_to_arm(view, workspace_id)
    if view.get("type") == "sweep":
        return arm_pipeline_jobs.sweep_to_arm(view, workspace_id)
    if view.get("type") == "batch_scoring":
        return arm_batch.scoring_job_to_arm(view, workspace_id)
    return arm_jobs.to_arm(view, workspace_id, code_id)


def _no_store(code_id: str) -> str:
    raise AssertionError(f"a body without a codeId asked for code {code_id!r}")  # from_arm reads codeId only


def _code_id(body: Any) -> str | None:
    props = body.get("properties") if isinstance(body, dict) else None
    code = props.get("codeId") if isinstance(props, dict) else None
    trial = props.get("trial") if isinstance(props, dict) else None
    if not code and isinstance(trial, dict):
        code = trial.get("codeId")  # a sweep's trial
    return str(code) if code else None
