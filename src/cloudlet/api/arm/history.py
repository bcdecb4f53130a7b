"""The run-history routes azure-ai-ml reads to follow a job (``jobs.stream``): the discovery
document that names the run-history service, a run's details with its log files (a pipeline's
or sweep's: one execution log made from its children), a parent's children
(``jobs.list(parent_job_name=…)``), and the log files themselves behind URLs that carry their own
signature (the SDK fetches them without
credentials, as it fetches Azure's SAS log URLs).

Paths are ARM's: ``/history/v1.0/subscriptions/{sub}/resourceGroups/{rg}/providers/
Microsoft.MachineLearningServices/workspaces/{ws}/runs/{run}/details``; the run is the job."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, Query, Response
from fastapi import Path as PathParam
from pydantic import BaseModel, ConfigDict, Field

from cloudlet.api.arm import WS, https_base
from cloudlet.api.arm.wire import arm_outputs, arm_pipeline_jobs
from cloudlet.api.deps import Context, context, json_response
from cloudlet.api.openapi import errors
from cloudlet.api.routing import PublicRoute, UserRoute
from cloudlet.domain.access.roles import Access
from cloudlet.domain.jobs.job_spec import JOB_NAME_PATTERN
from cloudlet.services.access import signed_urls, workspaces
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.core.storage import read_beneath, relative_parts
from cloudlet.services.jobs import job_children, job_outputs
from cloudlet.services.jobs import jobs as job_service

if TYPE_CHECKING:
    from cloudlet.store.schema import Job


HISTORY = "/history/v1.0" + WS
LOG_PURPOSE = "run-log"
LOG_URL_LIFETIME_S = 15 * 60
MAX_LOG_BYTES = 64 << 20  # a log fetched whole (the SDK prints what is new since its last fetch)
# The services the SDK may look up in the discovery document: all of them are this server.
DISCOVERY_KEYS = (
    "api",
    "catalog",
    "experimentation",
    "gallery",
    "history",
    "hyperdrive",
    "labeling",
    "modelmanagement",
    "pipelines",
    "studiofrontend",
)

# The log a parent job (by kind) shows: what the SDK's jobs.stream looks for (JobLogPattern).
PARENT_LOGS = {
    "pipeline": arm_pipeline_jobs.EXECUTION_LOG,
    "batch_scoring": arm_pipeline_jobs.EXECUTION_LOG,  # a batch job is pipeline-shaped (arm_batch)
    "sweep": arm_pipeline_jobs.SWEEP_LOG,
}
TEXT: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/plain": {}}, "description": "The log's text"}
}
JobName = Annotated[str, PathParam(pattern=JOB_NAME_PATTERN.pattern, max_length=255)]

router = APIRouter(tags=["arm-run-history"], route_class=UserRoute)
public = APIRouter(tags=["arm-run-history"], route_class=PublicRoute)


def discovery_document(base_url: str) -> dict[str, str]:
    return {key: base_url for key in DISCOVERY_KEYS}


@public.get("/discovery/workspaces/{ws_id}")
async def discovery(ws_id: str, ctx: Context = Depends(context)) -> Response:
    """What ``properties.discoveryUrl`` of a workspace points at (no credentials, as on Azure)."""
    return json_response(discovery_document(_base_url(ctx)))


@router.get(HISTORY + "/runs/{name}/details")
def run_details(sub: str, rg: str, ws: str, name: JobName, ctx: Context = Depends(context)) -> Response:
    workspace = workspaces.resolve(ctx.session, WorkspaceRef(sub, rg, ws), ctx.caller, Access.READ)
    job = job_service.get(ctx.session, workspace, name)
    attempt = max(job.attempt, 1)
    parent_log = PARENT_LOGS.get(job.kind)
    if parent_log is not None:  # a pipeline's execution log, a sweep's: made from its children
        urls = {parent_log: log_url(_base_url(ctx), ctx.state.token_secret, job, 0, parent_log)}
        if job.kind == "batch_scoring":
            urls.update(_scoring_logs(ctx, job))
    else:
        urls = {
            file: log_url(_base_url(ctx), ctx.state.token_secret, job, attempt, file)
            for file in job_service.log_files(ctx.state.data, job, attempt)
        }
    return json_response(details_view(job, urls))


def _scoring_logs(ctx: Context, parent: Job) -> dict[str, str]:
    """A batch job's scoring child's log files (its latest attempt's ``user_logs/std_log.txt``:
    the driver's log and what the scoring script prints) under their own names, so that
    ``jobs.stream(<batch job>)`` prints them as it follows the batch job, as the SDK prints a
    command job's (it prefers ``user_logs/std_log*.txt`` to the execution log once there is one)."""
    urls: dict[str, str] = {}
    for kid in job_children.children(ctx.session, parent)[:1]:  # a batch job has one child
        attempt = max(kid.attempt, 1)
        for file in job_service.log_files(ctx.state.data, kid, attempt):
            urls[file] = log_url(_base_url(ctx), ctx.state.token_secret, kid, attempt, file)
    return urls


@router.get(HISTORY + "/runs/{name}/children")
def run_children(
    sub: str,
    rg: str,
    ws: str,
    name: JobName,
    top: Annotated[int | None, Query(alias="$top", ge=1, le=job_service.MAX_PAGE)] = None,
    ctx: Context = Depends(context),
) -> Response:
    """A pipeline's steps / a sweep's trials as runs (``jobs.list(parent_job_name=…)``), in the
    order they were started; ``$top`` at most. One page: a parent's children are bounded."""
    workspace = workspaces.resolve(ctx.session, WorkspaceRef(sub, rg, ws), ctx.caller, Access.READ)
    parent = job_service.get(ctx.session, workspace, name)
    kids = job_children.children(ctx.session, parent)[:top]
    value = [arm_pipeline_jobs.run_view(_child_fields(kid, parent)) for kid in kids]
    return json_response({"value": value, "continuationToken": None, "nextLink": None})


class RunDataRequest(BaseModel):
    """What ``jobs.download`` asks of a run (``GetRunDataRequest``); the selections are ignored:
    the answer always carries the run's metadata."""

    model_config = ConfigDict(extra="allow")
    run_id: str = Field(alias="runId", pattern=JOB_NAME_PATTERN.pattern, max_length=255)


@router.post(HISTORY + "/rundata")
def run_data(
    sub: str, rg: str, ws: str, request: RunDataRequest, ctx: Context = Depends(context)
) -> Response:
    """A run's metadata for ``jobs.download``: its data outputs as typed asset references, which
    the SDK resolves to datastore URIs with the data plane's ``batchGetResolvedUris``
    (``api/arm/data_plane.py``); the default artifacts are at ``ExperimentRun/dcid.{job}/`` of
    ``workspaceartifactstore``."""
    workspace = workspaces.resolve(ctx.session, WorkspaceRef(sub, rg, ws), ctx.caller, Access.READ)
    job = job_service.get(ctx.session, workspace, request.run_id)
    found = job_outputs.outputs(ctx.session, job)
    outputs = arm_outputs.run_outputs(found, workspace.location, workspace.name, job.name)
    metadata = {**details_view(job, {}), "outputs": outputs}
    metadata.pop("logFiles")
    return json_response({"runMetadata": metadata, "runDefinition": None, "jobSpecification": None})


@public.get("/history/logs/{reference}", responses={**TEXT, **errors(400, 403, 503)})
def run_log(reference: str, ctx: Context = Depends(context)) -> Response:
    """A log file named by a signed reference (``log_url``): no credentials, a short lifetime."""
    claims = signed_urls.verify(ctx.state.token_secret, LOG_PURPOSE, reference)
    if int(claims["a"]) == 0 and str(claims["f"]) in PARENT_LOGS.values():
        return Response(_parent_log(ctx, int(claims["w"]), str(claims["j"])), media_type="text/plain")
    base = ctx.state.data.job_dir(int(claims["w"]), str(claims["j"]), int(claims["a"]))
    parts = relative_parts(str(claims["f"]), "file")
    chunk = read_beneath(base, parts, 0, MAX_LOG_BYTES) if base.is_dir() else None
    return Response(chunk or b"", media_type="text/plain; charset=utf-8")


def _parent_log(ctx: Context, workspace_id: int, name: str) -> str:
    parent = job_service.find_in(ctx.session, workspace_id, name)
    if parent is None:
        return ""
    steps = [
        {**_child_fields(kid, parent), "key": kid.child_key or kid.name}
        for kid in job_children.children(ctx.session, parent)
    ]
    noun = "trial" if parent.kind == "sweep" else "step"
    return arm_pipeline_jobs.execution_log(parent.name, steps, parent.status, noun)


def _child_fields(kid: Job, parent: Job) -> dict[str, Any]:
    spec = kid.spec or {}
    return {
        "name": kid.name,
        "parent": parent.name,
        "display_name": spec.get("display_name"),
        "description": spec.get("description"),
        "experiment_name": spec.get("experiment_name") or (parent.spec or {}).get("experiment_name"),
        "status": kid.status,
        "tags": spec.get("tags"),
        "properties": spec.get("properties"),
        "created": _iso(kid.submitted_at),
        "started": _iso(kid.started_at),
        "ended": _iso(kid.ended_at),
        "compute": kid.compute_name,
    }


def log_url(base_url: str, secret: str, job: Job, attempt: int, file: str) -> str:
    claims = {"w": job.workspace_id, "j": job.name, "a": attempt, "f": file}
    return f"{base_url}/history/logs/{signed_urls.sign(secret, LOG_PURPOSE, claims, LOG_URL_LIFETIME_S)}"


def details_view(job: Job, log_urls: dict[str, str]) -> dict[str, Any]:
    """A run's details in the run-history shape (``RunDetails``) for a job."""
    error = None
    if job.error:
        error = {
            "error": {"code": job.error.get("code", "JobFailed"), "message": job.error.get("message", "")}
        }
    return {
        "runId": job.name,
        "runUuid": None,
        "target": job.compute_name,
        "status": job.status,
        "createdTimeUtc": _iso(job.submitted_at),
        "startTimeUtc": _iso(job.started_at),
        "endTimeUtc": _iso(job.ended_at),
        "error": error,
        "warnings": [{"source": "cloudlet", "message": text} for text in job.warnings or []],
        "tags": dict((job.spec or {}).get("tags") or {}),
        "properties": {},
        "logFiles": log_urls,
    }


def _iso(value: float | None) -> str | None:
    if value is None:
        return None
    return datetime.fromtimestamp(value, UTC).isoformat().replace("+00:00", "Z")


def _base_url(ctx: Context) -> str:
    return https_base(ctx.request, ctx.state)
