"""Telling the parent-job loop that it has work, once the change that made it is committed.

A pipeline's next step starts when the step before it completes: waiting for the loop's next
timed pass would put its interval into every hand-off. The code that moves a child job
(``services.job_status``), submits a parent or asks one to cancel marks the session; the listener
installed on a session factory calls ``on_work`` after that session commits (never for a change
that was rolled back).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

_MARK = "cloudlet.parent_job_work"


def parent_work(session: Session | None) -> None:
    """Note in SESSION that a parent job has work (heard when it commits)."""
    if session is not None:
        session.info[_MARK] = True


def listen(sessions: sessionmaker[Session], on_work: Callable[[], None]) -> None:
    """Call ON_WORK after each commit of a session from SESSIONS that gave a parent work."""

    def after_commit(session: Session) -> None:
        if session.info.pop(_MARK, False):
            on_work()

    def after_rollback(session: Session, _transaction: object) -> None:
        session.info.pop(_MARK, None)

    event.listen(sessions, "after_commit", after_commit)
    event.listen(sessions, "after_soft_rollback", after_rollback)
