"""Native REST routes for jobs and cluster nodes."""

from __future__ import annotations

import time
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Body, Depends, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from cloudlet.api.deps import AppState, Context, app_state, context, json_response
from cloudlet.api.openapi import json_body, schema_of
from cloudlet.api.routes_data import GZIP
from cloudlet.api.routing import UserRoute
from cloudlet.domain.bounds import MAX_ATTEMPT, MAX_OFFSET
from cloudlet.domain.errors import CloudletError, not_found
from cloudlet.domain.job_kind import JobKind
from cloudlet.domain.job_spec import JOB_NAME_PATTERN, CommandJobSpec
from cloudlet.domain.job_status import IN_ORDER
from cloudlet.domain.nodes import NodeEvent
from cloudlet.domain.quota import Tier
from cloudlet.domain.roles import Access
from cloudlet.domain.run_state import ExitReason
from cloudlet.services import assets as asset_service
from cloudlet.services import computes, dispatch, effects, job_cancel, tracking, workspaces
from cloudlet.services import jobs as job_service
from cloudlet.services import nodes as node_service
from cloudlet.services import parent_jobs as parent_service
from cloudlet.services import pipelines as pipeline_service
from cloudlet.services import sweeps as sweep_service
from cloudlet.services.context import Caller, WorkspaceRef
from cloudlet.services.storage import DEFAULT_DATASTORE, empty_tar, pack_beneath, relative_parts
from cloudlet.services.views import jobs as native_jobs
from cloudlet.store.schema import Node, Workspace

WS = "/subscriptions/{sub}/resourceGroups/{rg}/workspaces/{ws}"
router = APIRouter(prefix="/api/v1", tags=["jobs"], route_class=UserRoute)
JobName = Annotated[str, Path(pattern=JOB_NAME_PATTERN.pattern, description="the job's name")]
StatusFilter = Annotated[
    str | None,
    Query(
        pattern=f"^({'|'.join(status.value for status in IN_ORDER)})$",
        description="only jobs in this status",
    ),
]
JOB_DOCUMENT = json_body(schema_of(CommandJobSpec))


def _workspace(ctx: Context, sub: str, rg: str, ws: str, needed: Access) -> tuple[WorkspaceRef, Workspace]:
    ref = WorkspaceRef(sub, rg, ws)
    return ref, workspaces.resolve(ctx.session, ref, ctx.caller, needed)


def _base_url(ctx: Context) -> str:
    return str(ctx.request.base_url).rstrip("/")


# -- jobs -------------------------------------------------------------------------------------
@router.put(WS + "/jobs/{name}", status_code=201, openapi_extra=JOB_DOCUMENT)
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
    prepared = job_service.prepare(body, name)  # pure: validated before the store is touched
    ref, base_url = WorkspaceRef(sub, rg, ws), str(request.base_url).rstrip("/")
    job = await state.batcher.apply(job_service.submission(ref, name, prepared, caller, state.data))
    return json_response(native_jobs.render(job, ref, [], base_url), 201)


@router.get(WS + "/jobs/{name}")
def show_job(sub: str, rg: str, ws: str, name: JobName, ctx: Context = Depends(context)) -> Response:
    ref = WorkspaceRef(sub, rg, ws)
    _, job = job_service.readable(ctx.session, ref, ctx.caller, name)
    body = native_jobs.render(job, ref, job_service.runs_of(ctx.session, job), _base_url(ctx))
    body["assets"] = asset_service.uses_view(ctx.session, job.id)  # the versions resolved at submission
    body.update(tracking.job_view(ctx.session, job.id))  # MLflow: latest metric values and params
    if job.kind != JobKind.COMMAND.value:
        kids = parent_service.children(ctx.session, job)
        body["children"] = native_jobs.render_children(kids)
        if job.kind == JobKind.PIPELINE.value:
            body["dag"] = pipeline_service.dag(job, kids)
            for output, path in pipeline_service.outputs(job, kids).items():
                body["outputs"].setdefault(output, {})["uri"] = path
        if job.kind == JobKind.SWEEP.value:  # the best trial; each trial's values and metric
            body["sweep"] = sweep_service.view(ctx.session, job, kids, tracking.metric_history)
    return json_response(body)


@router.get(WS + "/jobs")
def list_jobs(
    sub: str,
    rg: str,
    ws: str,
    status: StatusFilter = None,
    compute: Annotated[str | None, Query(max_length=64)] = None,
    top: Annotated[int, Query(alias="$top", ge=1, le=job_service.MAX_PAGE)] = job_service.DEFAULT_PAGE,
    skip_token: Annotated[str | None, Query(alias="$skipToken", max_length=512)] = None,
    parent: Annotated[
        str | None, Query(pattern=JOB_NAME_PATTERN.pattern, description="only this job's child jobs")
    ] = None,
    ctx: Context = Depends(context),
) -> Response:
    """Jobs newest first, ``$top`` at a time; ``nextLink`` (absent on the last page) fetches the next."""
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    page = job_service.list_jobs(ctx.session, workspace, status, compute, top, skip_token, parent)
    body: dict[str, Any] = {"value": [native_jobs.render(j, ref, [], _base_url(ctx)) for j in page.jobs]}
    if page.next_token is not None:
        query = {
            "status": status,
            "compute": compute,
            "parent": parent,
            "$top": top,
            "$skipToken": page.next_token,
        }
        kept = {k: v for k, v in query.items() if v is not None}
        body["nextLink"] = f"{str(ctx.request.url).split('?', 1)[0]}?{urlencode(kept)}"
    return json_response(body)


@router.post(WS + "/jobs/{name}/cancel", status_code=202)
def cancel_job(sub: str, rg: str, ws: str, name: JobName, ctx: Context = Depends(context)) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
    job, runs = job_cancel.cancel(ctx.session, workspace, name)
    return json_response(native_jobs.render(job, ref, runs, _base_url(ctx)), 202)


@router.get(WS + "/jobs/{name}/logs")
def job_logs(
    sub: str,
    rg: str,
    ws: str,
    name: JobName,
    file: Annotated[str, Query(min_length=1, max_length=512)] = "user_logs/std_log.txt",
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    attempt: Annotated[int | None, Query(ge=1, le=MAX_ATTEMPT)] = None,
    ctx: Context = Depends(context),
) -> Response:
    _, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    job = job_service.get(ctx.session, workspace, name)
    return json_response(job_service.read_log(ctx.state.data, job, attempt, file, offset))


@router.get(WS + "/jobs/{name}/outputs/{output}", responses=GZIP)
def job_output(
    sub: str, rg: str, ws: str, name: JobName, output: str, ctx: Context = Depends(context)
) -> Response:
    _, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    job = job_service.get(ctx.session, workspace, name)
    if output not in (job.spec.get("outputs") or {}):
        raise not_found("Output", output)
    # The output folder is the job's to write (links included): pack it without following any.
    # An output with a datastore path (a pipeline step's, a reused step's) is read there.
    data = ctx.state.data
    declared = job.spec["outputs"][output]
    given = declared.get("path") if isinstance(declared, dict) else None
    at = job_service.parse_datastore_uri(given) if isinstance(given, str) else None
    if at is None:
        default = data.job_output(workspace.id, job.name, output)
        at = (DEFAULT_DATASTORE, str(default.relative_to(data.datastore(workspace.id))))
    packed = pack_beneath(data.datastore(workspace.id, at[0]), relative_parts(at[1], "output"))
    return Response(packed or empty_tar(), media_type="application/gzip")


@router.get(WS + "/jobs/{name}/artifacts", responses=GZIP)
def job_artifacts(
    sub: str,
    rg: str,
    ws: str,
    name: JobName,
    attempt: Annotated[int | None, Query(ge=1, le=MAX_ATTEMPT, description="default: the latest")] = None,
    ctx: Context = Depends(context),
) -> Response:
    """An attempt's default artifacts (what it left in ``./outputs`` and ``./logs``) as a tar.gz."""
    _, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    job = job_service.get(ctx.session, workspace, name)
    return Response(
        job_service.artifacts_archive(ctx.state.data, job, attempt), media_type="application/gzip"
    )


# -- nodes ------------------------------------------------------------------------------------
@router.get(WS + "/computes/{name}/nodes")
def list_nodes(sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)) -> Response:
    _, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    compute = computes.get(ctx.session, workspace, name)
    return json_response(
        {"nodes": [node_service.render(n) for n in node_service.live_nodes(ctx.session, compute.id)]}
    )


class EvictBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    node_id: str = Field(min_length=1, max_length=32, description="the node, from list-nodes")


@router.post(WS + "/computes/{name}/evict")
def evict_node(
    sub: str, rg: str, ws: str, name: str, body: EvictBody, ctx: Context = Depends(context)
) -> Response:
    """Evict a low-priority node (operators and tests, C12): its jobs are requeued."""
    _, workspace = _workspace(ctx, sub, rg, ws, Access.MANAGE)
    compute = computes.get(ctx.session, workspace, name)
    node_id = body.node_id
    node = ctx.session.get(Node, node_id)
    if node is None or node_service.compute_of(node) != compute.id:
        raise CloudletError(
            "NodeNotFound",
            f"'{name}' has no node '{node_id}'; see `cloudlet compute list-nodes`",
            "node_id",
            404,
        )
    if node.tier != Tier.LOW_PRIORITY:
        raise CloudletError(
            "NotLowPriority",
            f"node {node_id} is dedicated; only low-priority nodes are evicted",
            "node_id",
            409,
        )
    now = time.time()
    node.error = {"code": "Preempted", "message": "evicted by an operator"}
    node_service.advance(node, NodeEvent.PREEMPT, now)
    wake = dispatch.fail_runs_on_node(ctx.session, node, ExitReason.PREEMPTED, now)
    effects.wake_nodes(ctx.session, [*wake, node.id])
    effects.demand_changed(ctx.session)
    ctx.commit()
    return json_response(node_service.render(node))
