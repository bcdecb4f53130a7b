"""Routes the node agents call (docs/agent-protocol.md): HTTP around ``services/compute/agent_protocol``.
Authenticated by per-node tokens (``NodeRoute``) before any body is read."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path as FilePath
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse

from cloudlet.api.deps import AppState, app_state, json_response
from cloudlet.api.routing import NodeCaller, NodeRoute
from cloudlet.domain.errors import CloudletError
from cloudlet.services.compute import agent_protocol as protocol
from cloudlet.services.compute.agent_protocol import (
    ExitReport,
    LogChunk,
    PollReport,
    Registration,
    RunningReport,
)
from cloudlet.services.core.metrics import AGENT_CONNECTIONS

log = logging.getLogger("cloudlet.agents")
router = APIRouter(prefix="/agent/v1", tags=["agent"], route_class=NodeRoute)
# Another server replica may have assigned work: look at the store this often. (The other worker
# processes of this server wake the poll at once: ``services/core/wake.py``.) Settable for the tests
# that show a poll woken across workers without waiting for a recheck.
POLL_RECHECK_S = float(os.environ.get("CLOUDLET_POLL_RECHECK_S", "1.0"))
RunId = Annotated[str, Path(max_length=40)]
NodeId = Annotated[str, Path(max_length=32)]


def _answer(state: AppState, answer: dict[str, Any]) -> Response:
    """An answer to an agent: the runs it starts get their secrets only now, on the way out."""
    return json_response(protocol.sealed(answer, state.token_secret))


def _node(request: Request) -> NodeCaller:
    node: NodeCaller = request.state.node  # authenticated by NodeRoute before the body was read
    return node


@router.post("/nodes/{node_id}/register")
def register(
    node_id: NodeId, request: Request, body: Registration, state: AppState = Depends(app_state)
) -> Response:
    peer = request.client.host if request.client else None
    return json_response(state.agents.register(node_id, _node(request).token, body, peer))


@router.post("/nodes/{node_id}/poll")
async def poll(
    node_id: NodeId,
    request: Request,
    body: PollReport,
    timeout: Annotated[
        float, Query(ge=0, le=60, description="seconds to hold the poll")
    ] = protocol.POLL_TIMEOUT_S,
    state: AppState = Depends(app_state),
) -> Response:
    """A long poll: answered as soon as the node has work (placed in this process or another
    worker of this server: at once; by another server replica: at the next look at the store),
    else when the timeout is up."""
    with AGENT_CONNECTIONS.track_inprogress():  # a node whose poll is held is connected
        return await _held_poll(node_id, _node(request).token, body, timeout, state)


async def _held_poll(node_id: str, token: str, body: PollReport, timeout: float, state: AppState) -> Response:
    deadline = time.monotonic() + timeout
    while True:
        answer = await run_in_threadpool(state.agents.poll_once, node_id, token, body)
        remaining = deadline - time.monotonic()
        if answer is not None or remaining <= 0:
            return _answer(state, answer or protocol.idle_answer())
        # Statuses were applied once; later rounds only look for work (and remember what it has).
        body = PollReport(usage=body.usage, reported=[r.run for r in body.runs])
        await state.notifier.wait(node_id, min(remaining, POLL_RECHECK_S))
        mail = state.notifier.take(node_id)
        if mail:  # placed and committed elsewhere in this process: answer without a store trip
            return _answer(state, protocol.idle_answer(mail))


@router.post("/runs/{run_id}/logs")
def upload_log(
    run_id: RunId, request: Request, body: LogChunk, state: AppState = Depends(app_state)
) -> Response:
    size = state.agents.append_log(run_id, _node(request).token, body)
    return json_response({"ok": True, "size": size})


@router.post("/runs/{run_id}/running")
async def run_running(
    run_id: RunId, request: Request, body: RunningReport, state: AppState = Depends(app_state)
) -> Response:
    work = protocol.running_report(run_id, _node(request).token, body)
    return json_response(await state.batcher.apply(work, urgent=True))


@router.post("/runs/{run_id}/exit")
async def run_exit(
    run_id: RunId, request: Request, body: ExitReport, state: AppState = Depends(app_state)
) -> Response:
    """Record the exit; the answer carries the node's next run when the exit freed it. A log chunk
    it carries is written first (the job has its whole log once it has ended)."""
    token = _node(request).token
    if body.log is not None:
        await run_in_threadpool(_exit_log, state, run_id, token, body.log)
    work = protocol.exit_report(run_id, token, body)
    return _answer(state, await state.batcher.apply(work, urgent=True))


def _exit_log(state: AppState, run_id: str, token: str, chunk: LogChunk) -> None:
    """The exit's log chunk. One refused (a gap: 409) is dropped, as a chunk posted alone is by the
    agent, and the exit is still recorded; an unknown run or a bad token is the exit's answer too."""
    try:
        state.agents.append_log(run_id, token, chunk)
    except CloudletError as exc:
        if exc.status in (401, 403, 404) or exc.status >= 500:
            raise
        log.warning("run %s: the log chunk of its exit was refused (%s); dropped", run_id, exc)


@router.get("/codes/{workspace_id}/{digest}", responses={200: {"content": {"application/gzip": {}}}})
def code_snapshot(
    workspace_id: Annotated[int, Path(ge=0, le=2**31)],
    digest: Annotated[str, Path(pattern=r"^[0-9a-f]{64}$")],
    request: Request,
    state: AppState = Depends(app_state),
) -> Response:
    path: FilePath = state.agents.code_snapshot(_node(request).workspace_id, workspace_id, digest)
    return FileResponse(path, media_type="application/gzip")
