"""Parent jobs (pipelines, sweeps): submitting one, carrying out a pass (its children are read
by ``services.jobs.job_children``).

The decisions are the kind's (``domain.jobs.parent_jobs``, ``domain.jobs.parent_kinds``); submission is the
jobs service's (``services.jobs.jobs.prepare`` and ``submit``). This module reads what the decisions are
made from and writes what they decide, in the caller's transaction:
- ``apply_step`` submits new children through the same path as any job (``services.jobs.jobs.submit``:
  the same checks, quotas and queues), records reused steps, cancels children and settles the
  parent once nothing it cancelled still runs.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from cloudlet.domain.jobs import job_status as statuses
from cloudlet.domain.jobs.job_kind import JobKind
from cloudlet.domain.jobs.job_spec import JOB_NAME_PATTERN
from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.domain.jobs.parent_jobs import EARLY_TERMINATED, NewChild, ParentContext, ParentStep
from cloudlet.domain.jobs.pipeline_bindings import ARTIFACTS_OUTPUT, is_default_artifacts
from cloudlet.services.core import effects
from cloudlet.services.core.context import Caller
from cloudlet.services.core.storage import DataRoot
from cloudlet.services.jobs import exits
from cloudlet.services.jobs import jobs as job_service
from cloudlet.services.jobs.job_children import children, output_uris
from cloudlet.services.jobs.job_status import set_status
from cloudlet.store.schema import Compute, Job, Workspace

# -- writing ---------------------------------------------------------------------------------
_INVALID_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")
MAX_NAME = 128  # jobs.name


def child_name(parent: str, key: str) -> str:
    """``<parent>-<key>`` as a valid job name; shortened with a hash when too long."""
    name = f"{parent}-{_INVALID_NAME_CHARS.sub('_', key)}"
    if len(name) > MAX_NAME:
        digest = hashlib.sha256(name.encode()).hexdigest()[:12]
        name = f"{name[: MAX_NAME - 13]}-{digest}"
    assert JOB_NAME_PATTERN.fullmatch(name), name
    return name


_REUSABLE = (
    select(Job)
    .where(
        Job.workspace_id == bindparam("ws"),
        Job.reuse_key == bindparam("key"),
        Job.status == JobStatus.COMPLETED.value,
    )
    .order_by(Job.ended_at.desc())
    .limit(1)
)


@dataclass
class Applied:
    """What a pass changed that others must hear after it commits."""

    fed: dict[int, Compute] = field(default_factory=dict)  # computes that got new children
    wake_nodes: list[str] = field(default_factory=list)  # agents whose runs were cancelled
    settled: bool = False


def caller_of(parent: Job) -> Caller:
    """Who submits a parent's children: its submitter, by name (``jobs.submit`` records it; the
    parent's submission was authorised, and a child reaches nothing the parent could not)."""
    return Caller(principal_id=0, name=parent.created_by, is_admin=False)


def submit_child(
    session: Session, ws: Workspace, parent: Job, child: NewChild, data: DataRoot, applied: Applied
) -> Job:
    name = child_name(parent.name, child.key)
    force = bool((parent.spec.get("settings") or {}).get("force_rerun"))
    earlier = None
    if child.reuse_key is not None and not force:
        earlier = session.scalar(_REUSABLE, {"ws": ws.id, "key": child.reuse_key})
    if earlier is not None:
        return _reused(session, ws, parent, child, name, earlier)
    prepared = job_service.prepare(child.doc, name)
    job, compute = job_service.submit(session, ws, name, prepared, caller_of(parent), data)
    job.parent_job_id, job.child_key, job.reuse_key = parent.id, child.key, child.reuse_key
    if compute is not None:
        applied.fed[compute.id] = compute
    return job


def _reused(session: Session, ws: Workspace, parent: Job, child: NewChild, name: str, earlier: Job) -> Job:
    """A step whose outputs an earlier job already made: recorded Completed at once, pointing at
    that job (its outputs are the earlier job's: ``view_of`` reads them there)."""
    now = time.time()
    made = output_uris(earlier.reused_from or earlier.name, earlier.spec, earlier.attempt)  # where they are
    outputs = {
        output: {**(value or {}), "path": made[output]} if output in made else value
        for output, value in (child.doc.get("outputs") or {}).items()
    }
    # A step's default artifacts are no output of its job: the earlier run's, recorded here.
    declared = (parent.spec.get("jobs") or {}).get(child.key, {}).get("outputs") or {}
    artifacts = made.get(ARTIFACTS_OUTPUT)
    if (
        artifacts
        and ARTIFACTS_OUTPUT in declared
        and is_default_artifacts(ARTIFACTS_OUTPUT, declared[ARTIFACTS_OUTPUT])
    ):
        outputs[ARTIFACTS_OUTPUT] = {"type": "uri_folder", "path": artifacts}
    job = Job(
        workspace_id=ws.id,
        name=name,
        # The compute that made the outputs (shown as the step's; it takes no node: it is over).
        compute_name=earlier.compute_name,
        spec={**child.doc, "outputs": outputs} if outputs else child.doc,
        kind=JobKind.COMMAND.value,
        status=JobStatus.COMPLETED.value,
        status_message=f"reused the outputs of job '{earlier.name}' (inputs, code and environment unchanged)",
        priority=2,
        instance_count=0,
        attempt=0,
        max_attempts=0,
        created_by=parent.created_by,
        submitted_at=now,
        started_at=now,
        ended_at=now,
        parent_job_id=parent.id,
        child_key=child.key,
        reuse_key=child.reuse_key,
        reused_from=earlier.reused_from or earlier.name,
    )
    session.add(job)
    session.flush()
    effects.parent_work(session)  # the parent's next steps may start at once
    return job


def apply_step(
    session: Session,
    ws: Workspace,
    parent: Job,
    step: ParentStep,
    present: Sequence[Job],
    data: DataRoot,
    now: float,
) -> Applied:
    """Carry out STEP for PARENT, whose children are PRESENT. Keys already present are not
    submitted again (a repeated pass changes nothing)."""
    applied = Applied()
    keys: dict[str, Job] = {job.child_key or job.name: job for job in present}
    for child in step.submit:
        if child.key not in keys:
            keys[child.key] = submit_child(session, ws, parent, child, data, applied)
    ending = step.outcome is not None or parent.cancel_requested
    active = statuses_active()
    cancel = {key for key, job in keys.items() if job.status in active} if ending else set(step.cancel)
    for key in sorted(cancel):
        job = keys.get(key)
        if job is not None and job.status in active and not job.cancel_requested:
            policy = step.reasons.get(key)  # a sweep's early-termination policy stopped it
            reason = policy or step.cancel_reason or "canceled by its parent"
            code = EARLY_TERMINATED if policy else "CanceledByParent"
            # On the child's error: its status message becomes "canceled" once its runs stop.
            job.status_message, job.error = reason, {"code": code, "message": reason}
            applied.wake_nodes += exits.cancel_job(session, job)
    if parent.status == JobStatus.QUEUED.value:
        set_status(parent, JobStatus.PREPARING, now, message=step.progress or "starting its children")
    elif step.progress and parent.status_message != step.progress:
        parent.status_message = step.progress
    if parent.status == JobStatus.PREPARING.value and any(
        job.status != JobStatus.QUEUED.value for job in keys.values()
    ):
        set_status(parent, JobStatus.RUNNING, now)
    if ending:
        applied.settled = _settle(parent, step, list(keys.values()), now)
    return applied


def statuses_active() -> frozenset[str]:
    return frozenset(status.value for status in statuses.ACTIVE)


def _settle(parent: Job, step: ParentStep | None, kids: list[Job], now: float) -> bool:
    """End the parent once none of its children is active (cancelled ones included)."""
    if any(job.status in statuses_active() for job in kids):
        return False
    failed = parent.error if isinstance(parent.error, dict) else None  # ``fail`` said why
    message: str | None
    if failed is not None:
        outcome, message = JobStatus.FAILED, str(failed.get("message"))
    elif parent.cancel_requested or step is None or step.outcome is None:
        outcome, message = JobStatus.CANCELED, "canceled: its children were canceled"
    else:
        outcome, message = step.outcome, step.message
    error = failed
    if outcome is JobStatus.FAILED and error is None:
        error = {"code": "ChildJobFailed", "message": message or "a child job failed"}
    if parent.status == JobStatus.QUEUED.value:
        set_status(parent, JobStatus.PREPARING, now)
    set_status(parent, outcome, now, message=message, error=error)
    return True


def fail(session: Session, parent: Job, reason: str, now: float) -> list[str]:
    """Fail PARENT for REASON: its active children are cancelled, and it ends Failed once they
    have stopped (now, when none runs). The agents to wake."""
    parent.error = {"code": "ChildJobNotSubmitted", "message": reason}
    parent.cancel_requested = True
    parent.status_message = reason
    kids = children(session, parent)
    wake: list[str] = []
    for job in kids:
        if job.status in statuses_active() and not job.cancel_requested:
            job.status_message = f"canceled: {reason}"
            wake += exits.cancel_job(session, job)
    _settle(parent, None, kids, now)
    return wake


def context_of(parent: Job, now: float) -> ParentContext:
    return ParentContext(
        now=now, started_at=parent.started_at or parent.submitted_at, cancel_requested=parent.cancel_requested
    )
