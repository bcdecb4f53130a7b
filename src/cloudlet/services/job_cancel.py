"""Cancelling a job (native ``…/cancel`` and the ARM facade's): one unit of work."""

from __future__ import annotations

from sqlalchemy.orm import Session

from cloudlet.services import effects, exits
from cloudlet.services import jobs as job_service
from cloudlet.store.schema import Job, JobRun, Workspace


def cancel(session: Session, workspace: Workspace, name: str) -> tuple[Job, list[JobRun]]:
    """Ask job NAME to end (committed): runs not yet on a node end here, the others are told to
    stop by their agents. The job and its runs as they stand, for the caller's view."""
    job = job_service.get(session, workspace, name)
    wake = exits.cancel_job(session, job)
    effects.wake_nodes(session, wake)
    effects.demand_changed(session)  # its queued demand is gone; its nodes may go idle
    runs = job_service.runs_of(session, job)
    session.commit()
    return job, runs
