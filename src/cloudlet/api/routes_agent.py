"""Routes the node agents call (docs/agent-protocol.md). Authenticated by per-node tokens."""

from __future__ import annotations

import time
from typing import Any, cast

from fastapi import APIRouter, Body, Depends, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse
from sqlalchemy import bindparam, select

from cloudlet.api.deps import AppState, app_state, json_response
from cloudlet.control.dispatch_batcher import Answer, Round, Work
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.nodes import NodeEvent, NodeState
from cloudlet.services import dispatch, exits
from cloudlet.services import nodes as node_service
from cloudlet.services.storage import append_at
from cloudlet.store.schema import Job, JobRun, Node

router = APIRouter(prefix="/agent/v1", tags=["agent"])
HEARTBEAT_S = 5
POLL_TIMEOUT_S = 20.0
POLL_RECHECK_S = 1.0  # another replica may have assigned work: look at the store this often


def _token(request: Request) -> str:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise CloudletError("AuthenticationFailed", "node token missing", status=401)
    return token.strip()


def _node(session: Any, node_id: str, token: str) -> Node:
    node = session.get(Node, node_id, options=node_service.REPORTS_DEFERRED)
    if node is None or node.token_hash != node_service.hash_token(token):
        raise CloudletError("AuthenticationFailed", "unknown node or wrong node token", status=401)
    if node.state in (NodeState.TERMINATED.value, NodeState.LOST.value, NodeState.PREEMPTED.value):
        raise CloudletError("NodeGone", f"node {node_id} is {node.state}; stop", status=403)
    return node


def _apply_runs(session: Any, node: Node, runs: list[dict[str, Any]], now: float) -> list[str]:
    wake: list[str] = []
    for status in runs:
        run = session.get(JobRun, str(status.get("run")))
        if run is None or run.node_id != node.id:
            continue
        if status.get("state") == "running":
            dispatch.record_running(session, run, status.get("pid"), status.get("started_at"))
        elif status.get("state") == "exited":
            wake += dispatch.record_exit(
                session,
                run,
                status.get("exit_code"),
                status.get("reason", "exited"),
                float(status.get("ended_at") or now),
                status.get("started_at"),
            )
    return wake


@router.post("/nodes/{node_id}/register")
def register(
    node_id: str, request: Request, body: Any = Body(default=None), state: AppState = Depends(app_state)
) -> Response:
    body = body or {}
    now = time.time()
    with state.sessions.begin() as session:
        node = _node(session, node_id, _token(request))
        node.resources = {
            **(body.get("resources") or {}),
            "hostname": body.get("hostname"),
            "agent_version": body.get("agent_version"),
            "pid": body.get("pid"),
            "address": body.get("address", "127.0.0.1"),
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
        wake = _apply_runs(session, node, body.get("runs") or [], now)
        wake += dispatch.schedule_freed(session, [node.id, *wake], state.data, state.endpoint)
    state.notifier.deliver(dispatch.deliveries(session))
    state.after_commit(wake)
    return json_response({"heartbeat_s": HEARTBEAT_S, "poll_timeout_s": POLL_TIMEOUT_S})


HEARTBEAT_WRITE_S = 2.0  # a quiet poll refreshes the stored heartbeat at most this often


def _quiet(state: AppState, node_id: str, token: str, body: dict[str, Any], now: float) -> bool:
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
        reported = {str(r.get("run")) for r in body.get("runs") or []} | set(body.get("reported") or [])
        for status in body.get("runs") or []:
            run = runs.get(str(status.get("run")))
            if run is not None and (status.get("state") == "exited" or run.state != dispatch.RUN_RUNNING):
                return False
        return not any(
            run.state == dispatch.ASSIGNED
            or run.reason == "cancel_requested"
            or (run.state == dispatch.SENT and run.id not in reported and dispatch.resend_due(run, now))
            for run in runs.values()
        )


def _poll_once(state: AppState, node_id: str, token: str, body: dict[str, Any]) -> dict[str, Any] | None:
    now = time.time()
    if _quiet(state, node_id, token, body, now):
        mail = state.notifier.take(node_id)
        return {"start": mail, "cancel": [], "terminate": False} if mail else None
    with state.sessions.begin() as session:
        node = _node(session, node_id, token)
        node.last_heartbeat = now
        node.usage = body.get("usage") or node.usage
        wake = _apply_runs(session, node, body.get("runs") or [], now)
        if wake:
            wake += dispatch.schedule_freed(session, wake, state.data, state.endpoint)
        reported = {str(r.get("run")) for r in body.get("runs") or []} | set(body.get("reported") or [])
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
    node_id: str, request: Request, body: Any = Body(default=None), state: AppState = Depends(app_state)
) -> Response:
    token, body = _token(request), body or {}
    deadline = time.monotonic() + min(float(request.query_params.get("timeout", POLL_TIMEOUT_S)), 60.0)
    while True:
        answer = await run_in_threadpool(_poll_once, state, node_id, token, body)
        remaining = deadline - time.monotonic()
        if answer is not None or remaining <= 0:
            return json_response(answer or {"start": [], "cancel": [], "terminate": False})
        # Statuses were applied once; later rounds only look for work (and remember what it has).
        body = {"usage": body.get("usage"), "reported": [str(r.get("run")) for r in body.get("runs") or []]}
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
    run_id: str, request: Request, body: Any = Body(default=None), state: AppState = Depends(app_state)
) -> Response:
    body = body or {}
    with state.read_sessions() as session:
        run = _run_of(session, run_id, _token(request))
        job_id, attempt, log_name = run.job_id, run.attempt, run.spec.get("log_name", "user_logs/std_log.txt")
        job = session.get(Job, job_id)
        assert job is not None
        path = state.data.job_dir(job.workspace_id, job.name, attempt) / log_name
    size = append_at(path, int(body.get("offset", 0)), str(body.get("data", "")).encode())
    return json_response({"ok": True, "size": size})


def running_report(run_id: str, token: str, body: dict[str, Any]) -> Work:
    """The batcher's work for "this run is running"."""

    def work(round_: Round) -> Answer:
        run = _run_of(round_.session, run_id, token, round_.memo)
        dispatch.record_running(round_.session, run, body.get("pid"), body.get("started_at"))
        return lambda _placed: {"ok": True}

    return work


def exit_report(run_id: str, token: str, body: dict[str, Any]) -> Work:
    """The batcher's work for "this run exited": plain SQL for the common case, the general path
    otherwise. Its answer carries the node's next run when one was placed on it."""

    def work(round_: Round) -> Answer:
        session, exit_code, reason = round_.session, body.get("exit_code"), body.get("reason", "exited")
        ended_at, started_at = float(body.get("ended_at") or time.time()), body.get("started_at")
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
    run_id: str, request: Request, body: Any = Body(default=None), state: AppState = Depends(app_state)
) -> Response:
    work = running_report(run_id, _token(request), body or {})
    return json_response(await state.dispatch_batcher().apply(work, urgent=True))


@router.post("/runs/{run_id}/exit")
async def run_exit(
    run_id: str, request: Request, body: Any = Body(default=None), state: AppState = Depends(app_state)
) -> Response:
    """Record the exit; the answer carries the node's next run when the exit freed it, so a busy
    node goes from one job to the next in one round trip."""
    work = exit_report(run_id, _token(request), body or {})
    return json_response(await state.dispatch_batcher().apply(work, urgent=True))


@router.get("/codes/{workspace_id}/{digest}")
def code_snapshot(
    workspace_id: int, digest: str, request: Request, state: AppState = Depends(app_state)
) -> Response:
    token = _token(request)
    with state.read_sessions() as session:
        node = session.scalar(select(Node).where(Node.token_hash == node_service.hash_token(token)))
        if node is None or node.workspace_id != workspace_id:
            raise CloudletError("AuthenticationFailed", "unknown node token", status=401)
    path = state.data.code(workspace_id, digest)
    if not path.exists():
        raise CloudletError("CodeNotFound", f"code snapshot {digest} is not stored", status=404)
    return FileResponse(path, media_type="application/gzip")
