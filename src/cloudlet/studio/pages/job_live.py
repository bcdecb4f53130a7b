"""A job page's live parts: the server-sent event stream (status and timings; the new bytes of a log
file, from ``jobs.read_log`` offsets), the metrics as JSON for the charts, and log downloads.

The stream polls the services every ``POLL_S`` in a worker thread (no store or file call on the
event loop), sends what changed, and ends when the job is final and its log stopped growing. An
event's id is the log offset after it: a reconnecting ``EventSource`` sends it back as
``Last-Event-ID`` and the stream resumes from there. The session is checked again every
``RECHECK_S`` (a revoked key or a removed role ends the stream as it ends a page load).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from cloudlet.api.deps import AppState, Context, context, json_response
from cloudlet.domain.errors import not_found
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.services.core.storage import empty_tar
from cloudlet.services.jobs import job_outputs, job_wait
from cloudlet.services.jobs import jobs as job_service
from cloudlet.services.jobs.job_status import FINAL_VALUES
from cloudlet.services.tracking import tracking
from cloudlet.studio import live, shell
from cloudlet.studio.live import event
from cloudlet.studio.session import PREFIX, StudioRoute

router = APIRouter(prefix=PREFIX, route_class=StudioRoute, include_in_schema=False)
JOB = "/ws/{sub}/{rg}/{ws}/jobs/{name}"
POLL_S = 0.3  # how often a stream reads the job and its log: the log's latency budget is 2 s
WAIT_POLL_S = 2.0  # how often a queued job's stream looks at its reason, position and ETA again
DEFAULT_LOG = "user_logs/std_log.txt"
MAX_OFFSET = 1 << 40
MAX_SERIES = 8  # runs on one chart
MAX_KEYS = 64


@dataclass(frozen=True)
class Timing:
    status: str
    status_message: str | None
    attempt: int
    submitted_at: float
    started_at: float | None
    ended_at: float | None

    def wire(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "status_message": self.status_message or "",
            "attempt": self.attempt,
            "submitted": clock(self.submitted_at),
            "started": clock(self.started_at),
            "ended": clock(self.ended_at),
            "duration": duration(self.started_at, self.ended_at),
            "final": self.status in FINAL_VALUES,
        }


def clock(value: float | None) -> str:
    """A stored time as the page shows it (UTC, to the second); "—" when not yet."""
    if value is None:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(value))


def duration(started: float | None, ended: float | None) -> str:
    """How long a job ran (so far, while it runs): ``1h 02m``, ``3m 05s``, ``4.2s``."""
    if started is None:
        return "—"
    seconds = max(0.0, (ended if ended is not None else time.time()) - started)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


@dataclass
class Poll:
    timing: Timing | None  # None: the job is gone
    text: str = ""
    next_offset: int = 0
    files: tuple[str, ...] = ()
    waiting: dict[str, Any] | None = None  # a queued job's reason, position and ETA, when asked


def _poll(
    state: AppState,
    ws_id: int,
    name: str,
    attempt: int | None,
    file: str | None,
    offset: int,
    wait: bool = False,
) -> Poll:
    """One look at the job and, with FILE, at its log past OFFSET (in a worker thread); with WAIT,
    a queued job's ``waiting`` too (its compute's queue as last read: ``job_wait``)."""
    with state.read_sessions() as session:
        job = job_service.find_in(session, ws_id, name)
        if job is None:
            return Poll(None)
        timing = Timing(
            job.status, job.status_message, job.attempt, job.submitted_at, job.started_at, job.ended_at
        )
        waiting = job_wait.why_waiting(session, job) if wait else None
        if file is None:
            return Poll(timing, next_offset=offset, waiting=waiting)
        chosen = min(attempt, max(job.attempt, 1)) if attempt is not None else None
        page = job_service.read_log(state.data, job, chosen, file, offset)
        return Poll(timing, page["data"], page["next_offset"], tuple(page["files"]), waiting)


def _still_readable(state: AppState, ref: WorkspaceRef, name: str) -> Callable[[Caller], None]:
    """The services' read check again, for a stream's caller as the session now resolves it."""

    def check(caller: Caller) -> None:
        with state.read_sessions() as session:
            job_service.readable(session, ref, caller, name)

    return check


@dataclass
class JobFeed:
    """A job's status and timings whenever they change; with FILE, the attempt's log files and the
    log's new bytes past OFFSET (an event's id is the offset after it); done when the job is final
    and its log stopped growing."""

    state: AppState
    ws_id: int
    name: str
    attempt: int | None
    file: str | None
    offset: int
    last_timing: Timing | None = None
    last_files: tuple[str, ...] | None = None
    last_waiting: dict[str, Any] | None = None
    waited_at: float = 0.0

    def poll(self) -> live.Step:
        # A queued (or not yet read) job's wait every WAIT_POLL_S: the queue is re-read ≤ every 5 s.
        queued = self.last_timing is None or self.last_timing.status == "Queued"
        wait = queued and time.monotonic() - self.waited_at >= WAIT_POLL_S
        found = _poll(self.state, self.ws_id, self.name, self.attempt, self.file, self.offset, wait)
        if found.timing is None:
            return live.Step([event("end", {"reason": "the job is gone"})], done=True)
        step = live.Step()
        if found.timing != self.last_timing:
            self.last_timing = found.timing
            step.events.append(event("status", found.timing.wire()))
        if wait:
            self.waited_at = time.monotonic()
            shown = _wait_wire(found.waiting)
            if found.waiting is not None and shown != self.last_waiting:
                self.last_waiting = shown
                step.events.append(event("waiting", shown))
        if self.file is not None and found.files != self.last_files:
            self.last_files = found.files
            step.events.append(event("files", list(found.files)))
        if found.text:
            self.offset = found.next_offset
            step.events.append(event("log", {"text": found.text, "offset": self.offset}, self.offset))
            step.again = True  # more may be there already (a page is at most LOG_PAGE_BYTES)
        elif found.timing.status in FINAL_VALUES:  # final, and nothing new since: the log is complete
            done = {"status": found.timing.status, "offset": self.offset}
            step.events.append(event("end", done, self.offset))
            step.done = True
        return step


def _wait_wire(waiting: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the page shows of a wait (``eta_text`` is left out: it changes every minute by itself,
    the page words it from ``eta``)."""
    if waiting is None:
        return None
    keys = ("code", "message", "position_text", "ahead", "ahead_cores", "eta", "as_of")
    return {key: waiting.get(key) for key in keys}


@router.get(JOB + "/live")
def live_stream(
    sub: str,
    rg: str,
    ws: str,
    name: str,
    request: Request,
    file: Annotated[str | None, Query(min_length=1, max_length=512)] = None,
    attempt: Annotated[int | None, Query(ge=1, le=10_000)] = None,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    ctx: Context = Depends(context),
) -> Response:
    """``text/event-stream``: ``status`` (status, timings) whenever it changes; with FILE, ``files``
    (the attempt's log files) and ``log`` (``{text, offset}``, id = the offset after it) as the
    log grows; ``end`` when the job is final and its log complete."""
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    job_service.get(ctx.session, workspace, name)  # a 404 before the stream starts
    resumed = live.last_event_id(request, MAX_OFFSET)
    feed = JobFeed(ctx.state, workspace.id, name, attempt, file, offset if resumed is None else resumed)
    return live.respond(request, feed, _still_readable(ctx.state, ref, name), POLL_S)


def plotted(value: float) -> float | None:
    """A metric value as a chart point: NaN and infinities are gaps (JSON has neither)."""
    return value if math.isfinite(value) else None


def _series(values: list[tuple[int, float]]) -> list[list[float | None]]:
    """(step, value) pairs as uPlot's columns."""
    steps = [float(step) for step, _ in values]
    ys = [plotted(v) for _, v in values]
    return [steps, ys]  # type: ignore[list-item]


@router.get(JOB + "/metrics.json")
def metrics_json(
    sub: str,
    rg: str,
    ws: str,
    name: str,
    key: Annotated[list[str] | None, Query(max_length=MAX_KEYS)] = None,
    run: Annotated[list[str] | None, Query(max_length=MAX_SERIES)] = None,
    ctx: Context = Depends(context),
) -> Response:
    """``{"runs": [names], "metrics": {key: {run: [[steps], [values]]}}}``: the job's metric
    histories (every key unless KEY), and those of the other runs named by RUN (jobs of this
    workspace) for a comparison."""
    workspace, _ = shell.open_workspace(ctx, sub, rg, ws)
    job = job_service.get(ctx.session, workspace, name)
    jobs = {job.id: job.name}
    for other in run or []:
        found = job_service.find_in(ctx.session, workspace.id, other)
        if found is None:
            raise not_found("Job", other)
        jobs[found.id] = found.name
    keys = key or list(tracking.job_view(ctx.session, job.id)["metrics"])
    metrics: dict[str, dict[str, list[list[float | None]]]] = {}
    for metric in keys[:MAX_KEYS]:
        history = tracking.metric_history(ctx.session, list(jobs), metric)
        metrics[metric] = {
            jobs[job_id]: _series(values) for job_id, values in history.items() if job_id in jobs
        }
    return json_response(
        {"runs": list(jobs.values()), "metrics": metrics, "final": job.status in FINAL_VALUES},
        headers={"Cache-Control": "no-store"},
    )


@router.get(JOB + "/log")
def download_log(
    sub: str,
    rg: str,
    ws: str,
    name: str,
    file: Annotated[str, Query(min_length=1, max_length=512)] = DEFAULT_LOG,
    attempt: Annotated[int | None, Query(ge=1, le=10_000)] = None,
    ctx: Context = Depends(context),
) -> Response:
    """One log file whole, as a download (read a page at a time through ``jobs.read_log``)."""
    workspace, _ = shell.open_workspace(ctx, sub, rg, ws)
    job = job_service.get(ctx.session, workspace, name)
    chunks: list[str] = []
    offset = 0
    while True:
        page = job_service.read_log(ctx.state.data, job, attempt, file, offset)
        if not page["data"]:
            break
        chunks.append(page["data"])
        offset = page["next_offset"]
    if file not in page["files"]:
        raise not_found("Log file", file)
    filename = f"{name}-{page['attempt']}-{file.replace('/', '_')}"
    return Response(
        "".join(chunks),
        media_type="text/plain; charset=utf-8",
        headers={
            "Content-Disposition": f'attachment; filename="{_ascii(filename)}"',
            "Cache-Control": "no-store",
        },
    )


@router.get(JOB + "/artifacts.tar.gz")
def download_artifacts(
    sub: str,
    rg: str,
    ws: str,
    name: str,
    attempt: Annotated[int | None, Query(ge=1, le=10_000)] = None,
    ctx: Context = Depends(context),
) -> Response:
    """An attempt's default artifacts (``outputs/``, ``logs/``) as the REST route packs them."""
    workspace, _ = shell.open_workspace(ctx, sub, rg, ws)
    job = job_service.get(ctx.session, workspace, name)
    packed = job_service.artifacts_archive(ctx.state.data, job, attempt)
    filename = _ascii(f"{name}-artifacts.tar.gz")
    return Response(
        packed,
        media_type="application/gzip",
        headers={"Content-Disposition": f'attachment; filename="{filename}"', "Cache-Control": "no-store"},
    )


@router.get(JOB + "/outputs/{output}.tar.gz")
def download_output(
    sub: str, rg: str, ws: str, name: str, output: str, ctx: Context = Depends(context)
) -> Response:
    """A named output as the REST route packs it (``job_outputs.pack``); empty before it was written."""
    workspace, _ = shell.open_workspace(ctx, sub, rg, ws)
    job = job_service.get(ctx.session, workspace, name)
    packed = job_outputs.pack(ctx.session, ctx.state.data, workspace, job, output)
    filename = _ascii(f"{name}-{output}.tar.gz")
    return Response(
        packed or empty_tar(),
        media_type="application/gzip",
        headers={"Content-Disposition": f'attachment; filename="{filename}"', "Cache-Control": "no-store"},
    )


def _ascii(name: str) -> str:
    """A download's file name, safe inside a header's quotes."""
    return "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in name)[:200]
