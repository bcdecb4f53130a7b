"""The node agents' protocol (docs/agent-protocol.md): what registering, polling and reporting a
run do to the store. The agent routes (``api/routes_agent.py``) only translate HTTP to these.

The documents are typed here, because they are the protocol's: unknown fields are ignored, not
refused (a newer agent may say more than this server knows). Every call checks the node's token
and state itself; a report about a run is checked against the run's node.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Protocol, cast

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.domain.bounds import MAX_OFFSET
from cloudlet.domain.compute.node_address import reported_address
from cloudlet.domain.compute.nodes import NodeEvent, NodeState
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs.job_outcome import SINGLE_LOG
from cloudlet.domain.jobs.run_state import STOP_REQUESTED, ExitReason, RunState
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.compute import preemption
from cloudlet.services.core.batch import Answer, Round, Work
from cloudlet.services.core.storage import DataRoot, append_at, link_once
from cloudlet.services.jobs import dispatch, exits, prepared_specs, resource_monitoring
from cloudlet.services.tracking import tracking_tokens
from cloudlet.store.schema import Job, JobRun, Node

HEARTBEAT_S = 5
POLL_TIMEOUT_S = 20.0
HEARTBEAT_WRITE_S = 2.0  # a quiet poll refreshes the stored heartbeat at most this often


# -- the documents ------------------------------------------------------------------------------
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
    reason: str = Field(default=ExitReason.EXITED.value, max_length=32)


class Registration(_AgentBody):
    agent_version: str | None = Field(default=None, max_length=32)
    hostname: str | None = Field(default=None, max_length=255)
    pid: Pid = None
    address: str | None = Field(
        default=None, max_length=255, description="where other nodes and the proxy reach it"
    )
    resources: dict[str, Any] = Field(default_factory=dict)
    runs: list[RunStatus] = Field(default_factory=list, max_length=10_000)


class PollReport(_AgentBody):
    runs: list[RunStatus] = Field(default_factory=list, max_length=10_000)
    reported: list[Annotated[str, Field(max_length=40)]] = Field(default_factory=list, max_length=10_000)
    usage: dict[str, Any] | None = None
    idle: bool | None = None
    # Per-run resource samples taken since the last poll (agent/monitor.py), in time order.
    samples: list[dict[str, Any]] = Field(
        default_factory=list, max_length=resource_monitoring.MAX_SAMPLES_PER_POLL
    )


class LogChunk(_AgentBody):
    offset: int = Field(default=0, ge=0, le=MAX_OFFSET)
    data: str = Field(default="", max_length=8 << 20)


class RunningReport(_AgentBody):
    pid: Pid = None
    started_at: Epoch = None


class ExitReport(_AgentBody):
    exit_code: ExitCode = None
    reason: str = Field(default=ExitReason.EXITED.value, max_length=32)
    started_at: Epoch = None
    ended_at: Epoch = None
    # The log's last chunk (a tiny job's whole log): written before the exit is recorded, so the
    # job has its log when it ends, and the agent makes one request where it made two.
    log: LogChunk | None = None


class Mailbox(Protocol):
    """How run specs placed in this process reach the agents' waiting polls (``services/core/notify``)."""

    def deliver(self, placed: list[tuple[str, dict[str, Any]]]) -> None: ...

    def take(self, node_id: str) -> list[dict[str, Any]]: ...


# -- the protocol -------------------------------------------------------------------------------
def check_node(session: Session, node_id: str, token: str) -> Node:
    """The node, if the token is its own and it may still talk (401 / 403 otherwise)."""
    node = session.get(Node, node_id, options=node_service.REPORTS_DEFERRED)
    _check_token(node_id, node.token_hash if node else None, node.state if node else None, token)
    assert node is not None
    return node


_GONE = (NodeState.TERMINATED.value, NodeState.LOST.value, NodeState.PREEMPTED.value)


def _check_token(node_id: str, token_hash: str | None, state: str | None, token: str) -> None:
    """401 unless TOKEN is the node's own (TOKEN_HASH: None when the node is unknown); 403 when the
    node may no longer talk."""
    if token_hash is None or token_hash != node_service.hash_token(token):
        raise CloudletError("AuthenticationFailed", "unknown node or wrong node token", status=401)
    if state in _GONE:
        raise CloudletError("NodeGone", f"node {node_id} is {state}; stop", status=403)


def _apply_runs(session: Session, node: Node, runs: list[RunStatus], now: float) -> list[str]:
    wake: list[str] = []
    for status in runs:
        run = session.get(JobRun, status.run)
        if run is None or run.node_id != node.id:
            continue
        if status.state == RunState.RUNNING:
            dispatch.record_running(session, run, status.pid, status.started_at)
        else:
            ended_at = status.ended_at or now
            wake += exits.record_exit(
                session, run.id, status.exit_code, status.reason, ended_at, status.started_at
            )
    return wake


# A run report needs the run, its node and its job: one query loads all three (later gets of the
# node and job are answered from the session's identity map).
_RUN_NODE_JOB = (
    select(JobRun, Node, Job)
    .join(Node, Node.id == JobRun.node_id)
    .join(Job, Job.id == JobRun.job_id)
    .where(JobRun.id == bindparam("run"))
    .options(*node_service.REPORTS_DEFERRED)
)


# Where a run's log goes and who may write it, in one row of columns: every tiny job's log is
# written as it exits, and loading the run, node and job as objects cost more than the write.
_LOG_TARGET = (
    select(
        JobRun.node_id,
        JobRun.attempt,
        JobRun.spec["log_name"].as_string().label("log_name"),
        Job.workspace_id,
        Job.name,
        Node.token_hash,
        Node.state.label("node_state"),
    )
    .join(Node, Node.id == JobRun.node_id)
    .join(Job, Job.id == JobRun.job_id)
    .where(JobRun.id == bindparam("run"))
)


def run_of(session: Session, run_id: str, token: str, keep: dict[Any, Any] | None = None) -> JobRun:
    """The run, once its node's token checks out. KEEP holds the node and job loaded with it:
    the session's identity map only references objects weakly."""
    row = session.execute(_RUN_NODE_JOB, {"run": run_id}).first()
    if row is None:
        raise CloudletError("RunNotFound", f"run {run_id} is unknown", status=404)
    check_node(session, row.JobRun.node_id, token)
    if keep is not None:
        keep[("run", run_id)] = row
    return cast(JobRun, row.JobRun)


def running_report(run_id: str, token: str, report: RunningReport) -> Work:
    """The batched work for "this run is running"."""

    def work(round_: Round) -> Answer:
        run = run_of(round_.session, run_id, token, round_.memo)
        dispatch.record_running(round_.session, run, report.pid, report.started_at)
        return lambda _placed: {"ok": True}

    return work


def exit_report(run_id: str, token: str, report: ExitReport) -> Work:
    """The batched work for "this run exited" (``exits.record_exit``). Its answer carries the
    node's next run when one was placed on it, so a busy node goes from one job to the next in
    one round trip."""

    def work(round_: Round) -> Answer:
        session, exit_code, reason = round_.session, report.exit_code, report.reason
        ended_at, started_at = report.ended_at or time.time(), report.started_at
        view = exits.exit_view(session, run_id)  # the run and its node's token, in one read
        if view is None:
            raise CloudletError("RunNotFound", f"run {run_id} is unknown", status=404)
        node_id = view.node_id
        _check_token(node_id, view.token_hash, view.node_state, token)
        wake = exits.record_exit(session, run_id, exit_code, reason, ended_at, started_at, view)
        if wake == [node_id] and reason != preemption.PREEMPTED and _freed_cluster_node(view):
            # The node learns its next run from this answer: schedule its cluster, wake no one.
            round_.freed_on.add(view.compute_id)
        else:
            round_.freed += wake
            if reason == preemption.PREEMPTED:  # the node's engine took it back: no new work on it
                node = session.get(Node, node_id)
                if node is not None:
                    message = "its engine preempted the node (the agent's runs were signalled)"
                    round_.freed += preemption.engine_preempted(session, node, message, ended_at)
        return lambda placed: {"ok": True, "start": placed.pop(node_id, [])}

    return work


def _freed_cluster_node(view: Any) -> bool:
    """The exit freed a cluster's busy node (one job at a time): it is idle now."""
    busy = view.node_state == NodeState.BUSY.value
    return busy and view.operation_id is None and view.compute_id is not None


def sealed(answer: dict[str, Any], secret: str) -> dict[str, Any]:
    """ANSWER with the run specs it starts carrying their tokens (``tracking_tokens.seal``): the
    specs are stored and queued without them."""
    if not answer.get("start"):
        return answer
    return {**answer, "start": tracking_tokens.seal(answer["start"], secret)}


def idle_answer(start: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"start": start or [], "cancel": [], "terminate": False}


@dataclass
class AgentProtocol:
    """Registering and polling, against the store (``sessions`` write, ``read_sessions`` read).
    ``wake(nodes)`` runs after a commit that gave other nodes work (their polls answer at once)."""

    sessions: sessionmaker[Session]
    read_sessions: sessionmaker[Session]
    data: DataRoot
    server_url: Callable[[], str]
    mail: Mailbox
    wake: Callable[[list[str]], None]
    # Wakes the cluster pass, which builds a large attempt's run specs before taking the lock.
    prepare: Callable[[], None] = lambda: None

    def register(
        self, node_id: str, token: str, body: Registration, peer: str | None = None
    ) -> dict[str, Any]:
        """``peer``: the address the registration came from (used when the agent names none)."""
        now = time.time()
        with self.sessions.begin() as session:
            node = check_node(session, node_id, token)
            node.resources = {
                **body.resources,
                "hostname": body.hostname,
                "agent_version": body.agent_version,
                "pid": body.pid,
                "address": reported_address(body.address, peer),
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
            wake += dispatch.schedule_freed(session, [node.id, *wake], self.data, self.server_url())
            placed = dispatch.deliveries(session)  # handed over here, not by the commit's publisher
        self.mail.deliver(placed)
        self.wake(wake)
        if prepared_specs.wanted(session):
            self.prepare()
        # exit_log: this server takes a run's last log chunk inside its exit report
        return {"heartbeat_s": HEARTBEAT_S, "poll_timeout_s": POLL_TIMEOUT_S, "exit_log": True}

    def quiet(self, node_id: str, token: str, report: PollReport, now: float) -> bool:
        """True when this poll changes nothing: no new run states, no work for the node, a recent
        stored heartbeat. Such polls (most of them) are answered from a read-only transaction, so
        idle agents do not queue for the store's single writer."""
        with self.read_sessions() as session:
            node = check_node(session, node_id, token)
            stale = now - (node.last_heartbeat or 0) > HEARTBEAT_WRITE_S
            if stale or node.state == NodeState.TERMINATING.value:
                return False
            runs = {
                run.id: run
                for run in session.scalars(
                    select(JobRun).where(JobRun.node_id == node_id, JobRun.state != RunState.EXITED)
                )
            }
            reported = {r.run for r in report.runs} | set(report.reported)
            for status in report.runs:
                run = runs.get(status.run)
                if run is not None and (status.state == RunState.EXITED or run.state != RunState.RUNNING):
                    return False
            return not any(
                run.state == RunState.ASSIGNED
                or run.reason in STOP_REQUESTED
                or (run.state == RunState.SENT and run.id not in reported and dispatch.resend_due(run, now))
                for run in runs.values()
            )

    def poll_once(self, node_id: str, token: str, report: PollReport) -> dict[str, Any] | None:
        """One look: the poll's answer if it has one now (work, cancels, terminate), else None
        (the caller holds the poll and looks again)."""
        now = time.time()
        if report.samples:  # its own short transaction: the poll's answer need not wait for it
            with self.sessions.begin() as session:
                check_node(session, node_id, token)
                resource_monitoring.record_samples(session, node_id, report.samples, now)
        if self.quiet(node_id, token, report, now):
            mail = self.mail.take(node_id)
            return idle_answer(mail) if mail else None
        with self.sessions.begin() as session:
            node = check_node(session, node_id, token)
            node.last_heartbeat = now
            node.usage = report.usage or node.usage
            wake = _apply_runs(session, node, report.runs, now)
            if wake:
                wake += dispatch.schedule_freed(session, wake, self.data, self.server_url())
            reported = {r.run for r in report.runs} | set(report.reported)
            start, cancel = dispatch.runs_for_agent(session, node, reported, now)
            terminate = node.state == NodeState.TERMINATING.value
            placed = dispatch.deliveries(session)  # handed over here, not by the commit's publisher
        if prepared_specs.wanted(session):
            self.prepare()
        self.mail.deliver([(target, spec) for target, spec in placed if target != node_id])
        start += [spec for target, spec in placed if target == node_id] + self.mail.take(node_id)
        self.wake([w for w in wake if w != node_id])
        if start or cancel or terminate or wake:
            return {"start": start, "cancel": cancel, "terminate": terminate}
        return None

    def append_log(self, run_id: str, token: str, chunk: LogChunk) -> int:
        """Write a chunk of a run's log at its offset (retries are idempotent); the log's size."""
        with self.read_sessions() as session:
            target = session.execute(_LOG_TARGET, {"run": run_id}).first()
        if target is None:
            raise CloudletError("RunNotFound", f"run {run_id} is unknown", status=404)
        _check_token(target.node_id, target.token_hash, target.node_state, token)
        log_name = target.log_name or SINGLE_LOG
        path = self.data.job_dir(target.workspace_id, target.name, target.attempt) / log_name
        size = append_at(path, chunk.offset, chunk.data.encode())
        if chunk.offset == 0:  # the log is also one of the attempt's artifacts, as on Azure ML
            artifacts = self.data.job_artifacts(target.workspace_id, target.name, target.attempt)
            link_once(path, artifacts / log_name)
        return size

    def code_snapshot(self, node_workspace: int, workspace_id: int, digest: str) -> Any:
        """The path of a code snapshot a node may fetch: its own workspace's only."""
        if node_workspace != workspace_id:
            raise CloudletError(
                "AuthenticationFailed", "this node's token is not for that workspace", status=401
            )
        path = self.data.code(workspace_id, digest)
        if not path.exists():
            raise CloudletError("CodeNotFound", f"code snapshot {digest} is not stored", status=404)
        return path
