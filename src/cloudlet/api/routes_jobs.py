"""Native REST routes for jobs and cluster nodes."""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Body, Depends, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from cloudlet.api.deps import AppState, Context, app_state, context, json_response
from cloudlet.api.job_list_params import (
    CountToo,
    CreatorFilter,
    ExperimentFilter,
    JobSearchParams,
    NameSearch,
    OrderBy,
    SubmittedAfter,
    SubmittedBefore,
    TagFilter,
    TypeFilter,
    WithChildren,
)
from cloudlet.api.openapi import json_body, schema_of
from cloudlet.api.routes_data import GZIP
from cloudlet.api.routing import UserRoute
from cloudlet.domain.access.roles import Access
from cloudlet.domain.bounds import MAX_ATTEMPT, MAX_OFFSET
from cloudlet.domain.jobs.job_spec import JOB_NAME_PATTERN, CommandJobSpec
from cloudlet.domain.jobs.job_status import IN_ORDER
from cloudlet.services.access import workspaces
from cloudlet.services.compute import computes, preemption
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.services.core.storage import empty_tar
from cloudlet.services.jobs import job_cancel, job_outputs, job_search, notifications, resource_monitoring
from cloudlet.services.jobs import jobs as job_service
from cloudlet.services.views import jobs as native_jobs

if TYPE_CHECKING:
    from cloudlet.store.schema import Workspace

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
JOB_DOCUMENT = json_body(functools.partial(schema_of, CommandJobSpec))  # with the document


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
    return json_response(native_jobs.render(job, ref, [], base_url, state.endpoint), 201)


@router.get(WS + "/jobs/{name}")
def show_job(sub: str, rg: str, ws: str, name: JobName, ctx: Context = Depends(context)) -> Response:
    ref = WorkspaceRef(sub, rg, ws)
    _, job = job_service.readable(ctx.session, ref, ctx.caller, name)
    return json_response(native_jobs.view(ctx.session, ref, job, _base_url(ctx), ctx.state.endpoint))


@router.get(WS + "/jobs/{name}/deliveries")
def job_deliveries(sub: str, rg: str, ws: str, name: JobName, ctx: Context = Depends(context)) -> Response:
    """The job's notification delivery log: per email or webhook, its event, state, attempts,
    last status or error and next try (docs/observability.md "Notifications")."""
    ref = WorkspaceRef(sub, rg, ws)
    return json_response({"value": notifications.deliveries(ctx.session, ref, ctx.caller, name)})


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
    type: TypeFilter = None,
    created_by: CreatorFilter = None,
    experiment: ExperimentFilter = None,
    tag: TagFilter = None,
    search_text: NameSearch = None,
    submitted_after: SubmittedAfter = None,
    submitted_before: SubmittedBefore = None,
    include_children: WithChildren = False,
    orderby: OrderBy = None,
    count: CountToo = False,
    ctx: Context = Depends(context),
) -> Response:
    """Jobs newest first, ``$top`` at a time; ``nextLink`` (absent on the last page) fetches the next.
    Any of the studio's filters, ``$orderby`` or ``$count`` lists through ``services.jobs.job_search``
    (``count`` and ``countCapped`` answer ``$count=true``)."""
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    search = JobSearchParams(
        tuple(type or ()),
        tuple(created_by or ()),
        experiment,
        tuple(tag or ()),
        search_text,
        submitted_after,
        submitted_before,
        include_children,
        orderby,
        count,
    )
    if search.asked():
        query = search.query(status, compute, parent, top, skip_token)
        found = job_search.search_jobs(ctx.session, workspace, query)
        jobs: Any = found.jobs
        next_token = found.next_token
    else:
        page = job_service.list_jobs(ctx.session, workspace, status, compute, top, skip_token, parent)
        jobs, next_token = page.jobs, page.next_token
    body: dict[str, Any] = {
        "value": native_jobs.render_page(
            ctx.session, ref, workspace.id, jobs, _base_url(ctx), ctx.state.endpoint
        )
    }
    if search.asked() and query.count:
        body["count"], body["countCapped"] = found.count, found.count_capped
    if next_token is not None:
        kept = [(k, v) for k, v in ctx.request.query_params.multi_items() if k != "$skipToken"]
        body["nextLink"] = (
            f"{str(ctx.request.url).split('?', 1)[0]}?{urlencode([*kept, ('$skipToken', next_token)])}"
        )
    return json_response(body)


@router.post(WS + "/jobs/{name}/cancel", status_code=202)
def cancel_job(sub: str, rg: str, ws: str, name: JobName, ctx: Context = Depends(context)) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
    job, runs = job_cancel.cancel(ctx.session, workspace, name)
    return json_response(native_jobs.render(job, ref, runs, _base_url(ctx), ctx.state.endpoint), 202)


@router.get(WS + "/jobs/{name}/monitoring")
def job_monitoring(sub: str, rg: str, ws: str, name: JobName, ctx: Context = Depends(context)) -> Response:
    """The job's resource samples (downsampled), latest values and idle flags, per node."""
    _, job = job_service.readable(ctx.session, WorkspaceRef(sub, rg, ws), ctx.caller, name)
    return json_response(resource_monitoring.monitoring(ctx.session, job))


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
    _, job = job_service.readable(ctx.session, WorkspaceRef(sub, rg, ws), ctx.caller, name)  # one query
    return json_response(job_service.read_log(ctx.state.data, job, attempt, file, offset))


@router.get(WS + "/jobs/{name}/outputs/{output}", responses=GZIP)
def job_output(
    sub: str, rg: str, ws: str, name: JobName, output: str, ctx: Context = Depends(context)
) -> Response:
    _, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    job = job_service.get(ctx.session, workspace, name)
    packed = job_outputs.pack(ctx.session, ctx.state.data, workspace, job, output)
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
    return json_response(preemption.operator_evicts(ctx.session, compute, body.node_id, time.time()))
