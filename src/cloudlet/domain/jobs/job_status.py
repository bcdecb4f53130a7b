"""A job's status: an explicit state machine (pure), as ``NodeState`` is for nodes.

The values are Azure ML's job statuses, on the wire as-is. A job is submitted ``Queued``; placing an
attempt makes it ``Preparing``; its first process reporting makes it ``Running``; the attempt's
runs all ending settles it (``domain.jobs.job_outcome``) as ``Completed``, ``Failed`` or ``Canceled``, or
back to ``Queued`` when its nodes went away and attempts remain. A queued job is canceled at once;
a placed one once its runs have stopped. ``Finalizing`` is Azure's (output upload after the
process); nothing enters it yet, but it is listed, filtered on and counted as active, so its moves
are here for when something does. Azure's other statuses (NotStarted, Starting, Provisioning,
CancelRequested, NotResponding, Paused, Unknown) are never produced here.

``transition`` is the one check; ``changes`` adds the times a move stamps. ``services.jobs.job_status``
applies them, to an ORM row or as one guarded SQL UPDATE.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from cloudlet.domain.errors import CloudletError


class JobStatus(StrEnum):
    QUEUED = "Queued"
    PREPARING = "Preparing"
    RUNNING = "Running"
    FINALIZING = "Finalizing"
    COMPLETED = "Completed"
    FAILED = "Failed"
    CANCELED = "Canceled"


_S = JobStatus
FINAL: frozenset[JobStatus] = frozenset({_S.COMPLETED, _S.FAILED, _S.CANCELED})
ACTIVE: frozenset[JobStatus] = frozenset({_S.QUEUED, _S.PREPARING, _S.RUNNING, _S.FINALIZING})
# Statuses whose job holds nodes for a running attempt (working, not waiting).
WORKING: frozenset[JobStatus] = frozenset({_S.PREPARING, _S.RUNNING, _S.FINALIZING})
# What a job with this status may become. A settled attempt may end the job (or requeue it, its
# nodes lost) from Preparing as well as Running: a run can end before it reported running.
TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    _S.QUEUED: frozenset({_S.PREPARING, _S.CANCELED}),
    _S.PREPARING: frozenset({_S.RUNNING, _S.QUEUED, *FINAL}),
    _S.RUNNING: frozenset({_S.FINALIZING, _S.QUEUED, *FINAL}),
    _S.FINALIZING: FINAL,
    _S.COMPLETED: frozenset(),
    _S.FAILED: frozenset(),
    _S.CANCELED: frozenset(),
}
INITIAL = _S.QUEUED  # every job is submitted queued
# Display order: the lifecycle, then how jobs end (the API's status filter lists them so).
IN_ORDER: tuple[JobStatus, ...] = tuple(JobStatus)
_VALUES = frozenset(s.value for s in JobStatus)


class IllegalJobTransition(CloudletError):
    """A move the table does not allow: a bug in the caller, reported as a 409 naming both ends."""


def sources(to: JobStatus) -> frozenset[JobStatus]:
    """The statuses a job may move to ``to`` from (what a guarded UPDATE's WHERE allows)."""
    return frozenset(state for state, targets in TRANSITIONS.items() if to in targets)


def can_move(current: JobStatus | str, to: JobStatus) -> bool:
    try:
        return to in TRANSITIONS[JobStatus(current)]
    except ValueError:
        return False


def transition(current: JobStatus | str, to: JobStatus, name: str = "") -> JobStatus:
    """``to``, when a job that is ``current`` may become it; else ``IllegalJobTransition``."""
    if can_move(current, to):
        return to
    allowed = sorted(TRANSITIONS[JobStatus(current)]) if current in _VALUES else []
    shown = f"job '{name}'" if name else "a job"
    raise IllegalJobTransition(
        "JobStateConflict",
        f"{shown} is {current}; it cannot become {to.value} (from {current} it may become "
        f"{', '.join(allowed) or 'nothing: it has ended'})",
        name or None,
        409,
    )


def stamps(to: JobStatus, now: float) -> dict[str, Any]:
    """The columns any move to TO writes: the status (as its plain string) and the times it
    stamps. Ending stamps ``ended_at``; requeuing clears it (the job is waiting again).
    ``started_at`` is the first run's start, which only the caller knows
    (``services.jobs.job_status.set_status``)."""
    columns: dict[str, Any] = {"status": to.value}
    if to in FINAL:
        columns["ended_at"] = now
    elif to is JobStatus.QUEUED:
        columns["ended_at"] = None
    return columns


def changes(current: JobStatus | str, to: JobStatus, now: float, name: str = "") -> dict[str, Any]:
    """``stamps`` of a move from CURRENT, once ``transition`` allows it."""
    transition(current, to, name)
    return stamps(to, now)
