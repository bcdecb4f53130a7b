"""Routes the node agents call (docs/agent-protocol.md). Authenticated by per-node tokens."""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal, cast

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import bindparam, select

from cloudlet.api.deps import AppState, app_state, json_response
from cloudlet.api.routing import NodeCaller, NodeRoute
from cloudlet.control.dispatch_batcher import Answer, Round, Work
from cloudlet.domain.bounds import MAX_OFFSET
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.nodes import NodeEvent, NodeState
from cloudlet.services import dispatch, exits
from cloudlet.services import nodes as node_service
from cloudlet.services.storage import append_at
from cloudlet.store.schema import Job, JobRun, Node

router = APIRouter(prefix="/agent/v1", tags=["agent"], route_class=NodeRoute)
HEARTBEAT_S = 5
POLL_TIMEOUT_S = 20.0
POLL_RECHECK_S = 1.0  # another replica may have assigned work: look at the store this often
RunId = Annotated[str, Path(max_length=40)]
NodeId = Annotated[str, Path(max_length=32)]


# -- the agent's documents (docs/agent-protocol.md). Unknown fields are ignored, not refused: a
# newer agent may say more than this server knows.
class _AgentBody(BaseModel):
    model_config = ConfigDict(extra="ignore")


Pid = Annotated[int | None, Field(default=None, ge=0, le=2**31)]
Epoch = Annotated[float | None, Field(default=None, ge=0, le=1e11)]
ExitCode = Annotated[int | None, Field(default=None, ge=-(2**31), le=2**32)]


class RunStatus(_AgentBody):
    run: str = Field(max_length=40)
    state: Literal["running", "exited"]
    pid: Pid = None
    started_at: Epoch = None
    exit_code: ExitCode = None
    ended_at: Epoch = None
    reason: str = Field(default="exited", max_length=32)


class Registration(_AgentBody):
    agent_version: str | None = Field(default=None, max_length=32)
    hostname: str | None = Field(default=None, max_length=255)
    pid: Pid = None
    address: str = Field(default="127.0.0.1", max_length=255, description="where other nodes reach it")
    resources: dict[str, Any] = Field(default_factory=dict)
    runs: list[RunStatus] = Field(default_factory=list, max_length=10_000)


class PollReport(_AgentBody):
    runs: list[RunStatus] = Field(default_factory=list, max_length=10_000)
    reported: list[Annotated[str, Field(max_length=40)]] = Field(default_factory=list, max_length=10_000)
    usage: dict[str, Any] | None = None
    idle: bool | None = None


class LogChunk(_AgentBody):
    offset: int = Field(default=0, ge=0, le=MAX_OFFSET)
    data: str = Field(default="", max_length=8 << 20)


class RunningReport(_AgentBody):
    pid: Pid = None
    started_at: Epoch = None


class ExitReport(_AgentBody):
    exit_code: ExitCode = None
    reason: str = Field(default="exited", max_length=32)
    started_at: Epoch = None
    ended_at: Epoch = None


def _token(request: Request) -> str:
    node: NodeCaller = request.state.node  # authenticated by NodeRoute before the body was read
    return node.token


def _node(session: Any, node_id: str, token: str) -> Node:
    node = session.get(Node, node_id, options=node_service.REPORTS_DEFERRED)
    if node is None or node.token_hash != node_service.hash_token(token):
        raise CloudletError("AuthenticationFailed", "unknown node or wrong node token", status=401)
    if node.state in (NodeState.TERMINATED.value, NodeState.LOST.value, NodeState.PREEMPTED.value):
        raise CloudletError("NodeGone", f"node {node_id} is {node.state}; stop", status=403)
    return node


def _apply_runs(session: Any, node: Node, runs: list[RunStatus], now: float) -> list[str]:
    wake: list[str] = []
    for status in runs:
        run = session.get(JobRun, status.run)
        if run is None or run.node_id != node.id:
            continue
        if status.state == "running":
            dispatch.record_running(session, run, status.pid, status.started_at)
        else:
            wake += dispatch.record_exit(
                session, run, status.exit_code, status.reason, status.ended_at or now, status.started_at
            )
    return wake


@router.post("/nodes/{node_id}/register")
def register(
    node_id: NodeId, request: Request, body: Registration, state: AppState = Depends(app_state)
) -> Response:
    now = time.time()
    with state.sessions.begin() as session:
        node = _node(session, node_id, _token(request))
        node.resources = {
            **body.resources,
            "hostname": body.hostname,
            "agent_version": body.agent_version,
            "pid": body.pid,
            "address": body.address,
        }
        node.last_heartbeat, node.registered_at = now, node.registered_at or now
        # A server that crashed between the provider call and recording it left the node at
        # requested/allocated: the agent dialling in is proof the machine exists.
        if node.state == NodeState.REQUESTED.value:
            node_service.advance(node, NodeEvent.ALLOCATE, now)
        if node.state == NodeState.ALLOCATED.value:
            node_service.advance(node, NodeEvent.BOOT, now)
        if node.state == NodeState.STARTING.value:
            node_service.advance(node, NodeEvent.REGISTER, now)
        wake = _apply_runs(session, node, body.runs, now)
        wake += dispatch.schedule_freed(session, [node.id, *wake], state.data, state.endpoint)
    state.notifier.deliver(dispatch.deliveries(session))
    state.after_commit(wake)
    return json_response({"heartbeat_s": HEARTBEAT_S, "poll_timeout_s": POLL_TIMEOUT_S})


HEARTBEAT_WRITE_S = 2.0  # a quiet poll refreshes the stored heartbeat at most this often


def _quiet(state: AppState, node_id: str, token: str, body: PollReport, now: float) -> bool:
    """True when this poll changes nothing: no new run states, no work for the node, a recent
    stored heartbeat. Such polls (most of them) are answered from a read-only transaction, so
    idle agents do not queue for the store's single writer."""
    with state.read_sessions() as session:
        node = _node(session, node_id, token)
        if now - (node.last_heartbeat or 0) > HEARTBEAT_WRITE_S or node.state == NodeState.TERMINATING.value:
            return False
        runs = {
            run.id: run
            for run in session.scalars(
                select(JobRun).where(JobRun.node_id == node_id, JobRun.state != dispatch.EXITED)
            )
        }
        reported = {r.run for r in body.runs} | set(body.reported)
        for status in body.runs:
            run = runs.get(status.run)
            if run is not None and (status.state == "exited" or run.state != dispatch.RUN_RUNNING):
                return False
        return not any(
            run.state == dispatch.ASSIGNED
            or run.reason == "cancel_requested"
            or (run.state == dispatch.SENT and run.id not in reported and dispatch.resend_due(run, now))
            for run in runs.values()
        )


def _poll_once(state: AppState, node_id: str, token: str, body: PollReport) -> dict[str, Any] | None:
    now = time.time()
    if _quiet(state, node_id, token, body, now):
        mail = state.notifier.take(node_id)
        return {"start": mail, "cancel": [], "terminate": False} if mail else None
    with state.sessions.begin() as session:
        node = _node(session, node_id, token)
        node.last_heartbeat = now
        node.usage = body.usage or node.usage
        wake = _apply_runs(session, node, body.runs, now)
        if wake:
            wake += dispatch.schedule_freed(session, wake, state.data, state.endpoint)
        reported = {r.run for r in body.runs} | set(body.reported)
        start, cancel = dispatch.runs_for_agent(session, node, reported, now)
        terminate = node.state in (NodeState.TERMINATING.value,)
    placed = dispatch.deliveries(session)
    state.notifier.deliver([(target, spec) for target, spec in placed if target != node_id])
    start += [spec for target, spec in placed if target == node_id] + state.notifier.take(node_id)
    state.after_commit([w for w in wake if w != node_id])
    if start or cancel or terminate or wake:
        return {"start": start, "cancel": cancel, "terminate": terminate}
    return None


@router.post("/nodes/{node_id}/poll")
async def poll(
    node_id: NodeId,
    request: Request,
    body: PollReport,
    timeout: Annotated[float, Query(ge=0, le=60, description="seconds to hold the poll")] = POLL_TIMEOUT_S,
    state: AppState = Depends(app_state),
) -> Response:
    token = _token(request)
    deadline = time.monotonic() + timeout
    while True:
        answer = await run_in_threadpool(_poll_once, state, node_id, token, body)
        remaining = deadline - time.monotonic()
        if answer is not None or remaining <= 0:
            return json_response(answer or {"start": [], "cancel": [], "terminate": False})
        # Statuses were applied once; later rounds only look for work (and remember what it has).
        body = PollReport(usage=body.usage, reported=[r.run for r in body.runs])
        await state.notifier.wait(node_id, min(remaining, POLL_RECHECK_S))
        mail = state.notifier.take(node_id)
        if mail:  # placed and committed elsewhere in this process: answer without a store trip
            return json_response({"start": mail, "cancel": [], "terminate": False})


# A run report needs the run, its node and its job: one query loads all three (later gets of the
# node and job are answered from the session's identity map).
_RUN_NODE_JOB = (
    select(JobRun, Node, Job)
    .join(Node, Node.id == JobRun.node_id)
    .join(Job, Job.id == JobRun.job_id)
    .where(JobRun.id == bindparam("run"))
    .options(*node_service.REPORTS_DEFERRED)
)


def _run_of(session: Any, run_id: str, token: str, keep: dict[Any, Any] | None = None) -> JobRun:
    """The run, once its node's token checks out. KEEP holds the node and job loaded with it:
    the session's identity map only references objects weakly."""
    row = session.execute(_RUN_NODE_JOB, {"run": run_id}).first()
    if row is None:
        raise CloudletError("RunNotFound", f"run {run_id} is unknown", status=404)
    _node(session, row.JobRun.node_id, token)
    if keep is not None:
        keep[("run", run_id)] = row
    return cast(JobRun, row.JobRun)


@router.post("/runs/{run_id}/logs")
def upload_log(
    run_id: RunId, request: Request, body: LogChunk, state: AppState = Depends(app_state)
) -> Response:
    with state.read_sessions() as session:
        run = _run_of(session, run_id, _token(request))
        job_id, attempt, log_name = run.job_id, run.attempt, run.spec.get("log_name", "user_logs/std_log.txt")
        job = session.get(Job, job_id)
        assert job is not None
        path = state.data.job_dir(job.workspace_id, job.name, attempt) / log_name
    size = append_at(path, body.offset, body.data.encode())
    return json_response({"ok": True, "size": size})


def running_report(run_id: str, token: str, body: RunningReport) -> Work:
    """The batcher's work for "this run is running"."""

    def work(round_: Round) -> Answer:
        run = _run_of(round_.session, run_id, token, round_.memo)
        dispatch.record_running(round_.session, run, body.pid, body.started_at)
        return lambda _placed: {"ok": True}

    return work


def exit_report(run_id: str, token: str, body: ExitReport) -> Work:
    """The batcher's work for "this run exited": plain SQL for the common case, the general path
    otherwise. Its answer carries the node's next run when one was placed on it."""

    def work(round_: Round) -> Answer:
        session, exit_code, reason = round_.session, body.exit_code, body.reason
        ended_at, started_at = body.ended_at or time.time(), body.started_at
        freed = exits.record_simple_exit(session, run_id, token, exit_code, reason, ended_at, started_at)
        if freed is not None:
            node_id, compute_id = freed
            round_.freed_on.add(compute_id)
        else:
            run = _run_of(session, run_id, token, round_.memo)
            node_id = run.node_id
            round_.freed += dispatch.record_exit(session, run, exit_code, reason, ended_at, started_at)
        return lambda placed: {"ok": True, "start": placed.pop(node_id, [])}

    return work


@router.post("/runs/{run_id}/running")
async def run_running(
    run_id: RunId, request: Request, body: RunningReport, state: AppState = Depends(app_state)
) -> Response:
    work = running_report(run_id, _token(request), body)
    return json_response(await state.dispatch_batcher().apply(work, urgent=True))


@router.post("/runs/{run_id}/exit")
async def run_exit(
    run_id: RunId, request: Request, body: ExitReport, state: AppState = Depends(app_state)
) -> Response:
    """Record the exit; the answer carries the node's next run when the exit freed it, so a busy
    node goes from one job to the next in one round trip."""
    work = exit_report(run_id, _token(request), body)
    return json_response(await state.dispatch_batcher().apply(work, urgent=True))


@router.get("/codes/{workspace_id}/{digest}", responses={200: {"content": {"application/gzip": {}}}})
def code_snapshot(
    workspace_id: Annotated[int, Path(ge=0, le=2**31)],
    digest: Annotated[str, Path(pattern=r"^[0-9a-f]{64}$")],
    request: Request,
    state: AppState = Depends(app_state),
) -> Response:
    node: NodeCaller = request.state.node
    if node.workspace_id != workspace_id:  # a node fetches its own workspace's code only
        raise CloudletError("AuthenticationFailed", "this node's token is not for that workspace", status=401)
    path = state.data.code(workspace_id, digest)
    if not path.exists():
        raise CloudletError("CodeNotFound", f"code snapshot {digest} is not stored", status=404)
    return FileResponse(path, media_type="application/gzip")
