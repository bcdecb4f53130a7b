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

from sqlalchemy.orm import Session

from cloudlet.domain.events import EventType
from cloudlet.domain.jobs.run_state import PREEMPT_REQUESTED, ExitReason, RunState
from cloudlet.services.core import events
from cloudlet.services.jobs import exits
from cloudlet.services.jobs.fair_queue import PREEMPTED_EVENT, Victim
from cloudlet.store.rows import update_row
from cloudlet.store.schema import Compute, Job, JobRun


def stop(session: Session, compute: Compute, victims: list[Victim], now: float) -> list[str]:
    """Stop VICTIMS (checkpoint and requeue): the node ids to wake."""
    wake: list[str] = []
    for victim in victims:
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
