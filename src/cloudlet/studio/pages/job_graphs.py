"""A pipeline's graph as a full page, and the data of a pipeline's and a sweep's charts (issue 28).

- ``…/jobs/{name}/graph``: the pipeline's graph filling the page (pan and zoom), with its inputs
  and outputs as nodes and each binding as an edge named by the ports it joins; a step opens a
  panel with its inputs, outputs, timings and a link to its logs. The steps table below it is the
  graph's text alternative (``static/pipeline_graph.js`` draws from ``graph.json``).
- ``…/jobs/{name}/graph.json``: that graph as data (``pipelines.full_graph``); ``…/graph/live``:
  the same as ``graph`` server-sent events (``studio.live``), again whenever it changed, ``end``
  once the pipeline is final: the page draws from the stream and reads nothing again.
- ``…/jobs/{name}/trials.json``: a sweep's trials as its Child jobs tab charts them
  (``sweeps.view``: the ranking, the early-terminated trials and why), with each parameter's axis;
  ``…/trials/live``: the same as ``trials`` events, whenever they changed, until the sweep is final.

Read-only, like the job's page: a Reader sees all of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response

from cloudlet.api.deps import Context, context, json_response
from cloudlet.domain.errors import not_found
from cloudlet.domain.jobs.job_kind import JobKind
from cloudlet.domain.jobs.pipeline_graph import GraphStep, PipelineGraph
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.jobs import job_children, pipelines, sweeps
from cloudlet.services.jobs import jobs as job_service
from cloudlet.services.jobs.job_status import FINAL_VALUES
from cloudlet.services.tracking import tracking
from cloudlet.studio import live, shell
from cloudlet.studio.pages.job_live import JOB, clock, duration
from cloudlet.studio.pages.job_streams import still_readable
from cloudlet.studio.session import PREFIX, StudioRoute

if TYPE_CHECKING:
    from cloudlet.store.schema import Job, Workspace

router = APIRouter(prefix=PREFIX, route_class=StudioRoute, include_in_schema=False)
NO_STORE = {"Cache-Control": "no-store"}
CHOICE = "choice"  # a search-space expression drawn as a categorical axis
LOG_SCALED = frozenset({"loguniform", "qloguniform", "lognormal", "qlognormal"})
GRAPH_POLL_S = 1.0
TRIALS_POLL_S = 1.0


def _job_of_kind(
    ctx: Context, sub: str, rg: str, ws: str, name: str, kind: JobKind
) -> tuple[Job, WorkspaceRef, Workspace]:
    """The job NAME, which must be a pipeline / a sweep (else 404: it has no such page)."""
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    job = job_service.get(ctx.session, workspace, name)
    if job.kind != kind.value:
        raise not_found(f"{kind.value.capitalize()} job", name)
    return job, ref, workspace


def _node_id(node: tuple[str, str]) -> str:
    return f"{node[0]}:{node[1]}"


def _step_wire(ref: WorkspaceRef, step: GraphStep) -> dict[str, Any]:
    dag = step.step
    return {
        "id": f"step:{dag.key}",
        "key": dag.key,
        "display_name": step.display_name,
        "component": step.component,
        "status": dag.status,
        "compute": dag.compute,
        "upstream": list(dag.upstream),
        "job": dag.job,
        "url": shell.ws_url(ref, "jobs", dag.job) if dag.job else None,
        "logs_url": f"{shell.ws_url(ref, 'jobs', dag.job)}?tab=outputs" if dag.job else None,
        "reused_from": dag.reused_from,
        "reused_url": shell.ws_url(ref, "jobs", dag.reused_from) if dag.reused_from else None,
        "inputs": step.inputs,
        "outputs": step.outputs,
        "started": clock(step.started_at),
        "ended": clock(step.ended_at),
        "duration": duration(step.started_at, step.ended_at),
    }


def graph_wire(ref: WorkspaceRef, job: Job, graph: PipelineGraph) -> dict[str, Any]:
    """The graph as ``pipeline_graph.js`` draws it: nodes by id (``step:train``, ``input:data``,
    ``output:model``) and edges between them with their labels."""
    return {
        "name": job.name,
        "status": job.status,
        "final": job.status in FINAL_VALUES,
        "steps": [_step_wire(ref, step) for step in graph.steps],
        "inputs": graph.inputs,
        "outputs": graph.outputs,
        "edges": [
            {
                "source": _node_id(edge.source),
                "target": _node_id(edge.target),
                "source_port": edge.source_port,
                "target_port": edge.target_port,
                "label": edge.label,
            }
            for edge in graph.edges
        ],
    }


@router.get(JOB + "/graph")
def graph_page(sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)) -> HTMLResponse:
    job, ref, workspace = _job_of_kind(ctx, sub, rg, ws, name, JobKind.PIPELINE)
    graph = pipelines.full_graph(ctx.session, job)
    values: dict[str, Any] = {
        "job": job,
        "display_name": job.spec.get("display_name") or job.name,
        "job_url": shell.ws_url(ref, "jobs", job.name),
        "jobs_url": shell.ws_url(ref, "jobs"),
        "graph": graph_wire(ref, job, graph),
        "final": job.status in FINAL_VALUES,
    }
    title = f"{values['display_name']} · Graph"
    return shell.render(ctx, "job_graph.html", ref, workspace, active="jobs", title=title, **values)


@router.get(JOB + "/graph.json")
def graph_json(sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)) -> Response:
    job, ref, _ = _job_of_kind(ctx, sub, rg, ws, name, JobKind.PIPELINE)
    return json_response(graph_wire(ref, job, pipelines.full_graph(ctx.session, job)), headers=NO_STORE)


def _stream(
    ctx: Context,
    request: Request,
    where: tuple[str, str, str, str],
    kind: JobKind,
    wire: Callable[[Any, WorkspaceRef, Job], dict[str, Any]],
    poll_s: float,
) -> Response:
    """WIRE's document of the job as ``kind.value`` events whenever it changed; ``end`` once final."""
    sub, rg, ws, name = where
    _, ref, workspace = _job_of_kind(ctx, sub, rg, ws, name, kind)  # a 404 before the stream starts
    state, ws_id = ctx.state, workspace.id

    def read() -> tuple[dict[str, Any], bool]:
        with state.read_sessions() as session:
            job = job_service.find_in(session, ws_id, name)
            if job is None:
                raise not_found("Job", name)
            return wire(session, ref, job), job.status in FINAL_VALUES

    event_kind = "graph" if kind == JobKind.PIPELINE else "trials"
    return live.respond(request, live.JsonFeed(event_kind, read), still_readable(state, ref, name), poll_s)


@router.get(JOB + "/graph/live")
def graph_stream(
    sub: str, rg: str, ws: str, name: str, request: Request, ctx: Context = Depends(context)
) -> Response:
    """``text/event-stream``: ``graph`` (``graph.json``'s document) whenever it changed."""

    def wire(session: Any, ref: WorkspaceRef, job: Job) -> dict[str, Any]:
        return graph_wire(ref, job, pipelines.full_graph(session, job))

    return _stream(ctx, request, (sub, rg, ws, name), JobKind.PIPELINE, wire, GRAPH_POLL_S)


def _axis(name: str, expression: Any) -> dict[str, Any]:
    """A parameter's axis: a ``choice`` is categorical (its values, in order), the rest numeric;
    a log-distributed one on a log scale."""
    kind = str(expression.get("type")) if isinstance(expression, dict) else ""
    if kind == CHOICE:
        return {"name": name, "kind": "category", "values": list(expression.get("values") or [])}
    return {"name": name, "kind": "number", "log": kind in LOG_SCALED}


def _trial_number(key: str) -> int | None:
    return int(key) if key.isdigit() else None


@router.get(JOB + "/trials.json")
def trials_json(sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)) -> Response:
    """``{"metric", "goal", "best", "final", "axes": [{name, kind, values?}], "trials": [{index,
    key, name, url, status, params, metric, early_terminated, termination_reason}]}``."""
    job, ref, _ = _job_of_kind(ctx, sub, rg, ws, name, JobKind.SWEEP)
    return json_response(trials_wire(ctx.session, ref, job), headers=NO_STORE)


@router.get(JOB + "/trials/live")
def trials_stream(
    sub: str, rg: str, ws: str, name: str, request: Request, ctx: Context = Depends(context)
) -> Response:
    """``text/event-stream``: ``trials`` (``trials.json``'s document) whenever it changed."""
    return _stream(ctx, request, (sub, rg, ws, name), JobKind.SWEEP, trials_wire, TRIALS_POLL_S)


def trials_wire(session: Any, ref: WorkspaceRef, job: Job) -> dict[str, Any]:
    """A sweep's trials as its charts draw them."""
    view = sweeps.view(session, job, job_children.children(session, job), tracking.metric_history)
    best = view["best_trial"]
    trials = [
        {
            **{k: trial[k] for k in ("key", "name", "status", "params", "metric")},
            "index": _trial_number(trial["key"]),
            "url": shell.ws_url(ref, "jobs", trial["name"]),
            "early_terminated": trial["early_terminated"],
            "termination_reason": trial["termination_reason"],
        }
        for trial in view["trials"]
    ]
    return {
        "metric": view["objective"]["primary_metric"],
        "goal": view["objective"]["goal"],
        "best": best["key"] if best else None,
        "final": job.status in FINAL_VALUES,
        "axes": [_axis(str(k), v) for k, v in view["search_space"].items()],
        "trials": trials,
    }
