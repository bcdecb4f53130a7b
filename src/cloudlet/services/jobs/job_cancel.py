"""Cancelling a job (native ``…/cancel`` and the ARM facade's): one unit of work."""

from __future__ import annotations

from sqlalchemy.orm import Session

from cloudlet.domain.jobs.job_status import FINAL
from cloudlet.services.core import effects
from cloudlet.services.jobs import exits
from cloudlet.services.jobs import jobs as job_service
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


def cancel_many(session: Session, workspace: Workspace, names: list[str]) -> tuple[list[str], list[str]]:
    """Ask each of the jobs NAMES to end, in one transaction (the studio's bulk cancel): the names
    asked, and those skipped because they had already ended. An unknown name refuses them all."""
    asked: list[str] = []
    ended: list[str] = []
    wake: list[str] = []
    for name in dict.fromkeys(names):  # once each, in the order given
        job = job_service.get(session, workspace, name)
        if job.status in FINAL:
            ended.append(name)
            continue
        wake += exits.cancel_job(session, job)
        asked.append(name)
    effects.wake_nodes(session, wake)
    effects.demand_changed(session)
    session.commit()
    return asked, ended
