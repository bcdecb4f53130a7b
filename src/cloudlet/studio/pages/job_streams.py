"""A job page's other live streams (``studio.live``): its metric points for the charts, and a
pipeline's steps or a sweep's trials on the Child jobs tab.

- ``…/jobs/{name}/metrics/live[?run=…]``: ``points`` events, ``{"runs": [names], "metrics": {key:
  {run: [[steps], [values]]}}}``, each with the points logged since the last, read by
  ``tracking.metric_points_after``; the event's id is the last point's id, so a reconnecting
  ``EventSource`` resumes after it (``Last-Event-ID``): no point twice, none lost. The first events
  carry the history; ``end`` when the job is final and every point was sent.
- ``…/jobs/{name}/children/live``: ``children``, the tab's section rendered again (the template
  the page includes) whenever it changed, for htmx's ``sse-swap``; ``end`` once the job is final.
- ``…/jobs/{name}/monitoring/live``: ``monitoring``, the Monitoring tab's data (what
  ``monitoring.json`` answers: ``resource_monitoring.monitoring``) whenever a stored sample changed
  it; ``end`` when the job is final and a poll found no new samples.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from cloudlet.api.deps import AppState, Context, context
from cloudlet.domain.errors import not_found
from cloudlet.domain.jobs.job_kind import JobKind
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.services.jobs import job_children, pipelines, resource_monitoring
from cloudlet.services.jobs import jobs as job_service
from cloudlet.services.jobs.job_status import FINAL_VALUES
from cloudlet.services.tracking import tracking
from cloudlet.services.views import jobs as job_views
from cloudlet.studio import live, shell
from cloudlet.studio.live import event
from cloudlet.studio.pages.job_live import JOB, MAX_SERIES, plotted
from cloudlet.studio.session import PREFIX, StudioRoute

router = APIRouter(prefix=PREFIX, route_class=StudioRoute, include_in_schema=False)
METRIC_POLL_S = 0.5  # a logged point's budget to reach the chart is 2 s
CHILDREN_POLL_S = 1.0
MONITORING_POLL_S = 1.0  # agents sample every few seconds (CLOUDLET_MONITOR_INTERVAL_S)
POINTS_PER_EVENT = 20_000  # a longer history comes in several events, back to back
MAX_POINT_ID = 1 << 62


def still_readable(state: AppState, ref: WorkspaceRef, name: str) -> Callable[[Caller], None]:
    def check(caller: Caller) -> None:
        with state.read_sessions() as session:
            job_service.readable(session, ref, caller, name)

    return check


@dataclass
class MetricFeed:
    """The points JOB_IDS log (the page's job first, then the runs it is compared with)."""

    state: AppState
    ws_id: int
    name: str
    runs: dict[int, str]  # job id → its name, as the chart labels its series
    after: int  # the last point sent
    caught_up: bool = False  # the last poll read every point there was

    def poll(self) -> live.Step:
        with self.state.read_sessions() as session:
            job = job_service.find_in(session, self.ws_id, self.name)
            if job is None:
                return live.Step([event("end", {"reason": "the job is gone"})], done=True)
            final = job.status in FINAL_VALUES  # read before the points: none logged after is missed
            points = tracking.metric_points_after(
                session, list(self.runs), self.after, POINTS_PER_EVENT, recent=self.caught_up
            )
        self.caught_up = len(points) < POINTS_PER_EVENT
        if not points:
            return live.Step([event("end", {"status": job.status})], done=True) if final else live.Step()
        metrics: dict[str, dict[str, list[list[float | None]]]] = {}
        for point in points:
            steps, values = metrics.setdefault(point.key, {}).setdefault(self.runs[point.job_id], [[], []])
            steps.append(float(point.step))
            values.append(plotted(point.value))
        self.after = points[-1].id
        body = {"runs": list(self.runs.values()), "metrics": metrics}
        return live.Step([event("points", body, self.after)], again=not self.caught_up)


@router.get(JOB + "/metrics/live")
def metrics_stream(
    sub: str,
    rg: str,
    ws: str,
    name: str,
    request: Request,
    run: Annotated[list[str] | None, Query(max_length=MAX_SERIES)] = None,
    ctx: Context = Depends(context),
) -> Response:
    """``text/event-stream`` of the job's metric points (and RUN's, other jobs of this workspace)."""
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    job = job_service.get(ctx.session, workspace, name)
    runs = {job.id: job.name}
    for other in run or []:
        found = job_service.find_in(ctx.session, workspace.id, other)
        if found is None:
            raise not_found("Job", other)
        runs[found.id] = found.name
    after = live.last_event_id(request, MAX_POINT_ID) or 0
    feed = MetricFeed(ctx.state, workspace.id, name, runs, after)
    return live.respond(request, feed, still_readable(ctx.state, ref, name), METRIC_POLL_S)


def children_values(session: Any, ref: WorkspaceRef, job: Any, endpoint: str) -> dict[str, Any]:
    """What ``job_children.html`` shows: the job view (a sweep's trials), a pipeline's graph."""
    values: dict[str, Any] = {
        "view": job_views.view(session, ref, job, endpoint, endpoint),
        "job": job,
        "job_url": shell.ws_url(ref, "jobs", job.name),
        "final": job.status in FINAL_VALUES,
    }
    if job.kind == JobKind.PIPELINE.value:
        values["graph"] = pipelines.graph(job, job_children.children(session, job))
    return values


@router.get(JOB + "/children/live")
def children_stream(
    sub: str, rg: str, ws: str, name: str, request: Request, ctx: Context = Depends(context)
) -> Response:
    """``text/event-stream``: ``children`` (the tab's HTML, for htmx's ``sse-swap``) whenever a
    step's or trial's state changes; ``end`` when the job is final."""
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    job_service.get(ctx.session, workspace, name)  # a 404 before the stream starts
    view = shell.WorkspaceView(workspace.id, ref, workspace.location)
    state = ctx.state

    def render() -> tuple[str, bool]:
        with state.read_sessions() as session:
            job = job_service.find_in(session, view.id, name)
            if job is None:
                raise not_found("Job", name)
            values = children_values(session, ref, job, state.endpoint)
        caller = request.state.caller  # as the session last resolved it
        markup = shell.render_text(request, "job_children.html", caller, view, **values)
        return markup, job.status in FINAL_VALUES

    feed = live.FragmentFeed("children", render)
    return live.respond(request, feed, still_readable(state, ref, name), CHILDREN_POLL_S)


def monitoring_body(session: Any, job: Any) -> dict[str, Any]:
    """The Monitoring tab's data: the job's resource series per node, and whether the job is final
    (``monitoring.json`` and the stream's events are this)."""
    return {**resource_monitoring.monitoring(session, job), "final": job.status in FINAL_VALUES}


@dataclass
class MonitoringFeed:
    """The job's monitoring data, sent whole when it changed: a new sample changes the latest
    bucket, and compaction rewrites older ones, so the page redraws from what it is sent."""

    state: AppState
    ws_id: int
    name: str
    sent: bytes | None = None

    def poll(self) -> live.Step:
        with self.state.read_sessions() as session:
            job = job_service.find_in(session, self.ws_id, self.name)
            if job is None:
                return live.Step([event("end", {"reason": "the job is gone"})], done=True)
            body = monitoring_body(session, job)  # status and samples from one read
        encoded = event("monitoring", body)
        if encoded != self.sent:
            self.sent = encoded
            return live.Step([encoded])  # a final job: the next poll ends it, if nothing came since
        return live.Step([event("end", {"status": job.status})], done=True) if body["final"] else live.Step()


@router.get(JOB + "/monitoring/live")
def monitoring_stream(
    sub: str, rg: str, ws: str, name: str, request: Request, ctx: Context = Depends(context)
) -> Response:
    """``text/event-stream``: ``monitoring`` (the tab's JSON) when a sample changed it; ``end`` once
    the job is final and no new samples came."""
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    job_service.get(ctx.session, workspace, name)  # a 404 before the stream starts
    feed = MonitoringFeed(ctx.state, workspace.id, name)
    return live.respond(request, feed, still_readable(ctx.state, ref, name), MONITORING_POLL_S)
