"""A run's exit in plain SQL, for the common case: the only run of its job's current attempt, on a
cluster node, ending on its own. That is every tiny job of a busy cluster, and recording it
through ORM objects cost more than the rest of the job's trip through the server. Anything else
(several runs per attempt, cancels, timeouts, lost nodes, instances) takes the general path,
``dispatch.record_exit``. Both settle the job with ``domain.job_outcome.settle``, and both move
its status through ``services.job_status`` (here its guarded plain-SQL form).
"""

from __future__ import annotations

from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session, aliased

from cloudlet.domain import job_outcome, run_state
from cloudlet.domain.job_status import JobStatus, can_move
from cloudlet.domain.nodes import NodeEvent, NodeState
from cloudlet.domain.run_state import ExitReason, RunState
from cloudlet.services import assets as asset_service
from cloudlet.services import job_status
from cloudlet.services import nodes as node_service
from cloudlet.store.rows import held, update_row
from cloudlet.store.schema import Job, JobRun, Node

_ATTEMPT_MATES = aliased(JobRun)
# Everything the common case needs, in one row: the run, its node's credential and state, its
# job's attempt bookkeeping, and how many runs the attempt has.
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
        Job.status.label("job_status"),
        Job.attempt.label("job_attempt"),
        Job.max_attempts,
        Job.cancel_requested,
        Job.started_at.label("job_started_at"),
        Job.parent_job_id,
        select(func.count())
        .where(_ATTEMPT_MATES.job_id == JobRun.job_id, _ATTEMPT_MATES.attempt == JobRun.attempt)
        .scalar_subquery()
        .label("attempt_runs"),
    )
    .join(Node, Node.id == JobRun.node_id)
    .join(Job, Job.id == JobRun.job_id)
    .where(JobRun.id == bindparam("run"))
)


def record_simple_exit(
    session: Session,
    run_id: str,
    token: str,
    exit_code: int | None,
    reason: str,
    now: float,
    started_at: float | None,
) -> tuple[str, int] | None:
    """Record the exit when it is the common case: the freed node's id and its compute's, or None
    when it is not (nothing written then: the caller takes the general path, which also answers
    bad tokens)."""
    if held(session, (JobRun, run_id)):
        return None
    row = session.execute(_EXIT_VIEW, {"run": run_id}).first()
    if row is None or row.token_hash != node_service.hash_token(token):
        return None
    common = (
        reason == ExitReason.EXITED
        and row.state in run_state.LIVE
        and row.reason is None
        and row.attempt_runs == 1
        and row.attempt == row.job_attempt
        and not row.cancel_requested
        and row.operation_id is None  # a cluster's node: it runs one job at a time
        and row.compute_id is not None
        and row.node_state == NodeState.BUSY.value
        and not held(session, (Node, row.node_id), (Job, row.job_id))
    )
    if not common:
        return None
    run_end = [job_outcome.RunEnd(row.rank, exit_code, reason)]
    outcome = job_outcome.settle(run_end, row.attempt, row.max_attempts, False, now)
    to = JobStatus(outcome.pop("status"))
    if not can_move(row.job_status, to):
        return None  # the general path says why it cannot
    started = row.started_at or started_at or now
    ended = {
        "state": run_state.advance(row.state, RunState.EXITED, run_id).value,
        "exit_code": exit_code,
        "reason": reason,
        "ended_at": now,
        "started_at": started,
    }
    update_row(session, JobRun, run_id, ended)
    outcome.pop("ended_at", None)  # stamped by the status table, as the same time
    job_status.update_status(
        session,
        row.job_id,
        to,
        now,
        {"started_at": row.job_started_at or started, **outcome},
        child=row.parent_job_id is not None,
    )
    if to is JobStatus.COMPLETED:
        asset_service.register_outputs(session, int(row.job_id))  # named outputs become versions
    released = node_service.transition(row.node_id, row.node_state, NodeEvent.RELEASE, now)
    update_row(session, Node, row.node_id, released)
    return str(row.node_id), int(row.compute_id)
