"""A run's exit, one way for every caller: an agent's exit report or poll, a cancel, a node that was
lost, preempted or stopped (``record_exit``).

It reads what it needs in one row (``_EXIT_VIEW``: the run, its node, its job, how many runs the
attempt has) and writes in plain SQL: recording the exit of a tiny job through ORM objects cost
more than the rest of the job's trip through the server. Objects the session holds for these rows
(a caller's run, node or job) stay coherent with the writes (``store/rows.py``). The job is
settled with ``domain.jobs.job_outcome.settle`` once the whole attempt has ended, its status moved by
``services.jobs.job_status.update_status``.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session, aliased

from cloudlet.domain.compute.nodes import NodeEvent, NodeState
from cloudlet.domain.errors import conflict
from cloudlet.domain.jobs import job_outcome
from cloudlet.domain.jobs.job_kind import JobKind
from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.domain.jobs.run_state import CANCEL_REQUESTED, PREEMPT_REQUESTED, ExitReason, RunState
from cloudlet.domain.resources import COMPUTES
from cloudlet.services.assets import assets as asset_service
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.core import effects, events
from cloudlet.services.jobs import job_status
from cloudlet.store.rows import update_row
from cloudlet.store.schema import Compute, Job, JobRun, Node

ASSIGNED, EXITED = RunState.ASSIGNED, RunState.EXITED
_FINAL_JOB = frozenset(job_status.FINAL_VALUES)
_FREEABLE = (NodeState.BUSY.value, NodeState.DRAINING.value)

_ATTEMPT_MATES = aliased(JobRun)
# Everything an exit needs, in one row: the run, its node's credential and state (none when the
# node record is gone), its job's attempt bookkeeping, and how many runs the attempt has.
_EXIT_VIEW = (
    select(
        JobRun.state,
        JobRun.reason,
        JobRun.attempt,
        JobRun.rank,
        JobRun.started_at,
        JobRun.node_id,
        JobRun.job_id,
        Node.token_hash,
        Node.state.label("node_state"),
        Node.operation_id,
        node_service.OWNING_COMPUTE_ID,
        # the node's and the job's event sources (``events.NodeWas`` / ``JobWas``): not read again
        Node.workspace_id.label("node_workspace_id"),
        Node.owner_type,
        Node.owner_id,
        Compute.name.label("node_compute"),
        Job.workspace_id,
        Job.name,
        Job.compute_name,
        Job.status.label("job_status"),
        asset_service.pending_outputs(JobRun.job_id).label("pending_outputs"),  # most jobs have none
        Job.attempt.label("job_attempt"),
        Job.max_attempts,
        Job.preemptions,  # the scheduler's: those attempts do not count against max_attempts
        Job.cancel_requested,
        Job.started_at.label("job_started_at"),
        Job.parent_job_id,
        select(func.count())
        .where(_ATTEMPT_MATES.job_id == JobRun.job_id, _ATTEMPT_MATES.attempt == JobRun.attempt)
        .scalar_subquery()
        .label("attempt_runs"),
    )
    .outerjoin(Node, Node.id == JobRun.node_id)
    .outerjoin(Compute, (Node.owner_type == COMPUTES) & (Compute.id == Node.owner_id))
    .join(Job, Job.id == JobRun.job_id)
    .where(JobRun.id == bindparam("run"))
)
ExitView = Any  # a row of _EXIT_VIEW (SQLAlchemy types its rows by their every column)
_ATTEMPT_RUNS = select(
    JobRun.id, JobRun.rank, JobRun.state, JobRun.node_id, JobRun.exit_code, JobRun.reason, JobRun.spec
).where(JobRun.job_id == bindparam("job"), JobRun.attempt == bindparam("attempt"))
# Runs not yet ended, of a node or of a job.
ACTIVE_RUNS_ON_NODE = select(JobRun.id).where(JobRun.node_id == bindparam("node"), JobRun.state != EXITED)
_LIVE_RUNS_OF_JOB = select(JobRun.id, JobRun.state, JobRun.reason, JobRun.node_id).where(
    JobRun.job_id == bindparam("job"), JobRun.state != EXITED
)


def exit_view(session: Session, run_id: str) -> ExitView | None:
    """The ``_EXIT_VIEW`` row of the run (None for an unknown run); its node's token and state
    let an agent's report be checked with the same read."""
    return session.execute(_EXIT_VIEW, {"run": run_id}).first()


def record_exit(
    session: Session,
    run_id: str,
    exit_code: int | None,
    reason: str,
    now: float,
    started_at: float | None = None,
    view: ExitView | None = None,
) -> list[str]:
    """The run ended; settle its node and, when the whole attempt has ended, the job. VIEW: the
    run's ``exit_view`` when the caller read it already. The node ids to wake."""
    view = view if view is not None else exit_view(session, run_id)
    if view is None or view.state == EXITED:
        return []
    if view.reason == CANCEL_REQUESTED and reason == ExitReason.EXITED:
        reason = ExitReason.CANCELED
    if view.reason == PREEMPT_REQUESTED and _stopped(reason, exit_code):
        reason = ExitReason.PREEMPTED  # the scheduler stopped it: requeued, resumes from its checkpoint
    started = view.started_at or started_at or now
    ended = {
        "state": EXITED.value,
        "exit_code": exit_code,
        "reason": reason,
        "ended_at": now,
        "started_at": started,
    }
    update_row(session, JobRun, run_id, ended)
    if view.attempt_runs == 1:  # the attempt's only run: no query (its log is the single log)
        still_running: list[Any] = []
        ends = [job_outcome.RunEnd(view.rank, exit_code, reason)]
    else:  # read after the write above: this run is among them, ended
        runs = list(session.execute(_ATTEMPT_RUNS, {"job": view.job_id, "attempt": view.attempt}))
        still_running = [r for r in runs if r.state != EXITED]
        ends = [job_outcome.RunEnd(r.rank, r.exit_code, r.reason or "", _log_name(r.spec)) for r in runs]
    wake = [] if any(r.node_id == view.node_id for r in still_running) else _release_node(session, view, now)
    failed = exit_code not in (0, None) or reason in (ExitReason.TIMEOUT, *job_outcome.REQUEUE_REASONS)
    if still_running and failed:
        wake += cancel_runs(session, still_running)
    # A run can end before it reported running: the job's start is then its end's.
    job_started = {} if view.job_started_at is not None else {"started_at": started}
    # A job that ended meanwhile keeps how it ended: its compute's deletion cancels it while runs
    # on nodes already going away have yet to report.
    if not still_running and view.attempt == view.job_attempt and view.job_status not in _FINAL_JOB:
        _settle(session, view, ends, now, job_started)
    elif job_started:
        update_row(session, Job, view.job_id, job_started)
    return wake


def _stopped(reason: str, exit_code: int | None) -> bool:
    """A run the scheduler asked to stop ended by that ask (canceled by its agent, or its process
    exited on the SIGTERM), not by finishing first with exit code 0."""
    if reason == ExitReason.CANCELED:
        return True
    return reason == ExitReason.EXITED and exit_code != 0


def _log_name(spec: dict[str, Any] | None) -> str:
    return str((spec or {}).get("log_name") or job_outcome.SINGLE_LOG)


def _release_node(session: Session, view: ExitView, now: float) -> list[str]:
    if view.node_state not in _FREEABLE:
        return []
    side_by_side = view.operation_id is not None  # an instance's node (node_service.runs_jobs_side_by_side)
    if side_by_side and session.scalar(ACTIVE_RUNS_ON_NODE, {"node": view.node_id}) is not None:
        return [view.node_id]  # it still runs other jobs: it may take more now
    released = node_service.transition(view.node_id, view.node_state, NodeEvent.RELEASE, now)
    was = events.NodeWas(
        view.node_workspace_id, view.node_compute, view.node_state, view.owner_type, view.owner_id
    )
    events.nodes_moving(session, [(view.node_id, released)], {view.node_id: was})
    update_row(session, Node, view.node_id, released)
    return [view.node_id]


def _settle(
    session: Session, view: ExitView, ends: list[job_outcome.RunEnd], now: float, columns: dict[str, Any]
) -> None:
    outcome = job_outcome.settle(
        ends, view.job_attempt, view.max_attempts, view.cancel_requested, now, view.preemptions or 0
    )
    to = JobStatus(outcome.pop("status"))
    if to is JobStatus.QUEUED and view.reason == PREEMPT_REQUESTED:
        outcome.pop("status_message", None)  # the scheduler's words stay: why it was preempted
    outcome.pop("ended_at", None)  # stamped by the status table, as the same time
    was = events.JobWas(view.workspace_id, view.name, view.compute_name, view.job_status)
    job_status.update_status(
        session, view.job_id, to, now, {**columns, **outcome}, child=view.parent_job_id is not None, was=was
    )
    if to is JobStatus.COMPLETED and view.pending_outputs:
        asset_service.register_outputs(session, int(view.job_id))  # named outputs become asset versions


def cancel_runs(session: Session, runs: list[Any]) -> list[str]:
    """Ask the agents of RUNS (rows or ``JobRun``s with id, state, reason, node_id) to stop them:
    the node ids to wake."""
    wake = []
    for run in runs:
        if run.state != EXITED and run.reason != CANCEL_REQUESTED:
            update_row(session, JobRun, run.id, {"reason": CANCEL_REQUESTED})
            wake.append(run.node_id)
    return wake


def cancel_job(session: Session, job: Job) -> list[str]:
    """Ask JOB to end: a queued one is canceled at once; runs not yet on a node end here, the
    others are told to stop by their agents (the node ids to wake)."""
    if job.status in job_status.FINAL_VALUES:
        raise conflict("JobAlreadyEnded", f"job '{job.name}' already ended ({job.status})", job.name)
    now = time.time()
    job.cancel_requested = True
    if job.kind != JobKind.COMMAND.value:
        effects.parent_work(session)  # the parent-job loop cancels its children
    if job.status == JobStatus.QUEUED:
        job_status.set_status(job, JobStatus.CANCELED, now, message="canceled before it started")
    wake: list[str] = []
    live = []
    for run in session.execute(_LIVE_RUNS_OF_JOB, {"job": job.id}).all():
        if run.state == ASSIGNED:  # never reached the agent: end it here
            wake += record_exit(session, run.id, None, ExitReason.CANCELED, now)
        else:
            live.append(run)
    return wake + cancel_runs(session, live)


def fail_runs_on_node(session: Session, node: Node, reason: str, now: float) -> list[str]:
    """The node was preempted or lost: its runs end with that reason (and the job is requeued)."""
    wake: list[str] = []
    for run_id in session.scalars(ACTIVE_RUNS_ON_NODE, {"node": node.id}).all():
        wake += record_exit(session, run_id, None, reason, now)
    return wake
