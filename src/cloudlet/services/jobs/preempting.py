"""Carrying out the scheduler's preemptions (``fair_queue.FairRound.victims``) without losing work.

Each victim's runs are asked to stop as a cancel is (``job_runs.reason = preempt_requested``: the
agent sends SIGTERM so the process can write its checkpoint, waits its grace, then kills); their
exits are recorded as ``preempted`` (``exits.record_exit``), so the job is requeued and resumes
from its checkpoint dir (``CLOUDLET_CHECKPOINT_DIR`` persists between attempts). The attempt does
not use up one of its ``max_attempts`` (``job_outcome.settle`` discounts ``Job.preemptions``).

Written here, in the round's transaction: ``Job.preemptions`` + 1, the job's ``status_message``
(why, in words), and a job event ``Running → Preempted`` whose time counts against the pool's
hourly cap (``fair_queue.recent_preemptions``): the count is the store's, whichever process
preempted.
"""

from __future__ import annotations

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from cloudlet.domain.events import EventType
from cloudlet.domain.jobs.run_state import PREEMPT_REQUESTED, STOP_REQUESTED, ExitReason, RunState
from cloudlet.services.core import events
from cloudlet.services.jobs import exits, fair_queue
from cloudlet.services.jobs.fair_queue import PREEMPTED_EVENT, Victim
from cloudlet.store.rows import update_row
from cloudlet.store.schema import Compute, Job, JobRun

# Victims' rows, locked without waiting (PostgreSQL: a row another transaction holds — an exit
# under way, another replica's round — is skipped this round rather than waited for, so this
# never waits inside a lock cycle; SQLite's single writer serializes rounds already).
_LOCK_VICTIMS = (
    select(Job.id)
    .where(Job.id.in_(bindparam("jobs", expanding=True)), Job.status.in_(fair_queue.WORKING))
    .with_for_update(skip_locked=True)
)
# Runs of those jobs whose stop was asked meanwhile (another replica's round committed first).
_ASKED = select(JobRun.job_id).where(
    JobRun.job_id.in_(bindparam("jobs", expanding=True)),
    JobRun.state != RunState.EXITED.value,
    JobRun.reason.in_(sorted(STOP_REQUESTED)),
)


def stop(session: Session, compute: Compute, victims: list[Victim], now: float) -> list[str]:
    """Stop VICTIMS (checkpoint and requeue): the node ids to wake. A victim another transaction
    holds or already stops is left out: a preemption is carried out once."""
    if not victims:
        return []
    ids = [victim.job_id for victim in victims]
    held = set(session.scalars(_LOCK_VICTIMS, {"jobs": ids}))
    held -= set(session.scalars(_ASKED, {"jobs": sorted(held)})) if held else set()
    wake: list[str] = []
    for victim in victims:
        if victim.job_id not in held:
            continue
        p = victim.preemption
        update_row(
            session,
            Job,
            victim.job_id,
            {"preemptions": victim.preemptions + 1, "status_message": victim.message},
        )
        detail = {
            "message": victim.message,
            "reason": p.reason.value,
            "for_job": p.for_job,
            "lost_s": round(p.lost_s, 1),
            "preemptions": victim.preemptions + 1,
        }
        events.record(
            session,
            EventType.JOB,
            compute.workspace_id,
            p.victim,
            compute.name,
            victim.job_status,
            PREEMPTED_EVENT,
            detail,
            at=now,
        )
        for run in victim.runs:
            if run.run_state == RunState.ASSIGNED.value:  # never reached its agent: ends here
                update_row(session, JobRun, run.run_id, {"reason": PREEMPT_REQUESTED})
                wake += exits.record_exit(session, run.run_id, None, ExitReason.PREEMPTED, now)
            elif run.reason != PREEMPT_REQUESTED:
                update_row(session, JobRun, run.run_id, {"reason": PREEMPT_REQUESTED})
                wake.append(run.node_id)
    return wake
