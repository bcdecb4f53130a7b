"""A job's page, with tabs as in Azure ML studio: Overview, Outputs + logs, Metrics, Monitoring and, for a
pipeline or a sweep, Child jobs (``?tab=``). Read-only: a Reader sees all of it.

Everything on it is the job view every front door shows (``services.views.jobs.view``: the job,
its attempts, metrics, a pipeline's steps, a sweep's ranked trials) plus what the services read for
the studio: a pipeline's steps as a graph (``pipelines.graph``), the log files of an attempt
(``jobs.log_files``), the other runs of its experiment (``tracking_reads.experiment_peers``), and
why a queued job waits. The live parts (status, the log tail, metric points) are ``job_live``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse, RedirectResponse, Response

from cloudlet.api.deps import Context, context
from cloudlet.domain.jobs.job_kind import JobKind
from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.jobs import job_children, pipelines
from cloudlet.services.jobs import jobs as job_service
from cloudlet.services.jobs.job_status import FINAL_VALUES
from cloudlet.services.tracking import tracking_reads
from cloudlet.services.views import jobs as job_views
from cloudlet.studio import shell
from cloudlet.studio.pages import job_forms, job_streams
from cloudlet.studio.pages.job_live import DEFAULT_LOG, JOB, clock, duration
from cloudlet.studio.session import PREFIX, StudioRoute

if TYPE_CHECKING:
    from cloudlet.store.schema import Job

router = APIRouter(prefix=PREFIX, route_class=StudioRoute, include_in_schema=False)
OLD_NEW = "new"  # the submit form's address before it moved to …/jobs/_new
TAIL_BYTES = 256 * 1024  # how much of a long log the page shows at first (the download has it all)
TABS = ("overview", "outputs", "metrics", "monitoring", "children")
TAB_LABELS = {
    "overview": "Overview",
    "outputs": "Outputs + logs",
    "metrics": "Metrics",
    "monitoring": "Monitoring",
    "children": "Child jobs",
}


@dataclass(frozen=True)
class LogFolder:
    """A folder of an attempt's log tree and its files (name, size)."""

    path: str
    files: list[tuple[str, str, int]]  # (file name as read_log takes it, base name, bytes)


def log_tree(files: dict[str, int]) -> list[LogFolder]:
    """An attempt's log files grouped by folder, the top folder first."""
    folders: dict[str, list[tuple[str, str, int]]] = {}
    for name, size in files.items():
        folder, _, base = name.rpartition("/")
        folders.setdefault(folder, []).append((name, base, size))
    return [LogFolder(path, folders[path]) for path in sorted(folders)]


def waiting(job: Job) -> dict[str, Any] | None:
    """Why a queued or preparing job has not started, in words, when the job view does not say
    (``waiting``, from ``services.jobs.job_wait``): the job's own status message."""
    if job.status not in (JobStatus.QUEUED.value, JobStatus.PREPARING.value):
        return None
    return {"message": job.status_message or "waiting for its compute", "position": None, "ahead": None}


def _active_tab(tab: str | None, kind: str) -> str:
    if tab == "children" and kind == JobKind.COMMAND.value:
        return "overview"
    return tab if tab in TABS else "overview"


def _size(value: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value = value / 1024  # type: ignore[assignment]
    return str(value)


@router.get(JOB)
def job_page(
    sub: str,
    rg: str,
    ws: str,
    name: str,
    tab: Annotated[str | None, Query(max_length=32)] = None,
    attempt: Annotated[int | None, Query(ge=1, le=10_000)] = None,
    file: Annotated[str | None, Query(min_length=1, max_length=512)] = None,
    ctx: Context = Depends(context),
) -> Response:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    if name == OLD_NEW and job_service.find_in(ctx.session, workspace.id, name) is None:
        # The submit form's old address (now …/jobs/_new), kept for bookmarks while no job is so named.
        return RedirectResponse(shell.ws_url(ref, "jobs", job_forms.NEW), status_code=303)
    job = job_service.get(ctx.session, workspace, name)
    view = job_views.view(ctx.session, ref, job, ctx.state.endpoint, ctx.state.endpoint)
    active = _active_tab(tab, job.kind)
    values: dict[str, Any] = {
        "job": job,
        "view": view,
        "tab": active,
        "tabs": [t for t in TABS if t != "children" or job.kind != JobKind.COMMAND.value],
        "tab_labels": TAB_LABELS,
        "job_url": shell.ws_url(ref, "jobs", job.name),
        "jobs_url": shell.ws_url(ref, "jobs"),
        "display_name": job.spec.get("display_name") or job.name,
        "timing": {
            "submitted": clock(job.submitted_at),
            "started": clock(job.started_at),
            "ended": clock(job.ended_at),
            "duration": duration(job.started_at, job.ended_at),
        },
        "final": job.status in FINAL_VALUES,
        "error": job_children.error_text(job),
        "waiting": view.get("waiting") or waiting(job),
        "compute_url": _compute_url(ref, job.compute_name),
        "parent": _parent(ctx, ref, job),
        "size": _size,
    }
    if active == "outputs":
        chosen = job_service.chosen_attempt(job, attempt)
        files = job_service.log_files(ctx.state.data, job, chosen)
        shown = file or (DEFAULT_LOG if DEFAULT_LOG in files or not files else next(iter(files)))
        values.update(
            attempt=chosen,
            attempts=list(range(1, max(job.attempt, 1) + 1)),
            log_tree=log_tree(files),
            log_file=shown,
            log_from=max(0, files.get(shown, 0) - TAIL_BYTES),  # a long log: its end, and a download
            tail_bytes=TAIL_BYTES,
        )
    elif active == "metrics":
        values["peers"] = tracking_reads.experiment_peers(ctx.session, job)
    elif active == "children" and job.kind == JobKind.PIPELINE.value:
        values["graph"] = pipelines.graph(job, job_children.children(ctx.session, job))
    title = f"{values['display_name']} · {TAB_LABELS[active]}"
    return shell.render(ctx, "job_page.html", ref, workspace, active="jobs", title=title, **values)


@router.get(JOB + "/monitoring.json")
def monitoring_json(sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)) -> Response:
    """The Monitoring tab's data: the job's resource series per node (``resource_monitoring``)."""
    workspace, _ = shell.open_workspace(ctx, sub, rg, ws)
    job = job_service.get(ctx.session, workspace, name)
    return JSONResponse(job_streams.monitoring_body(ctx.session, job))


def _compute_url(ref: WorkspaceRef, compute: str | None) -> str | None:
    """The compute's page; none for serverless or the server's own machine (``local``)."""
    if compute is None or compute == job_service.LOCAL_COMPUTE:
        return None
    return shell.ws_url(ref, "compute", compute)


def _parent(ctx: Context, ref: WorkspaceRef, job: Job) -> dict[str, str] | None:
    """The pipeline or sweep this job is a step or trial of (its name and page)."""
    parent = job_service.parent_of(ctx.session, job)
    if parent is None:
        return None
    return {"name": parent.name, "url": shell.ws_url(ref, "jobs", parent.name)}
