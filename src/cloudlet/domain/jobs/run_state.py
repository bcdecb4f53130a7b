"""A run's state and how it ended: an explicit state machine (pure), as ``JobStatus`` is for jobs.

A run is one process of a job attempt on one node (``job_runs``). Placing the attempt writes it
``sent`` (its spec travels with the agent's next answer) or ``assigned`` (waiting for one);
an agent reporting its process makes it ``running``; its exit, or the server ending it for its
node, makes it ``exited`` with an ``ExitReason``. A ``sent`` run the agent never reported is
sent again (``sent`` to ``sent``). ``exited`` is final.

The values are the strings stored in ``job_runs.state`` and ``job_runs.reason`` and spoken by
agents (``StrEnum``: each member equals its string).
"""

from __future__ import annotations

from enum import StrEnum

from cloudlet.domain.errors import CloudletError


class RunState(StrEnum):
    ASSIGNED = "assigned"
    SENT = "sent"
    RUNNING = "running"
    EXITED = "exited"


class ExitReason(StrEnum):
    """Why a run ended (``job_runs.reason``); ``domain.jobs.job_outcome`` settles the job from them."""

    EXITED = "exited"  # its process ended on its own; the exit code says how
    CANCELED = "canceled"  # the job was canceled, or its compute deleted or detached
    TIMEOUT = "timeout"  # it ran past limits.timeout and was stopped
    DOWNLOAD_FAILED = "download_failed"  # the node could not download an http(s) input
    UPLOAD_FAILED = "upload_failed"  # the node could not upload the run's outputs
    PREEMPTED = "preempted"  # its low-priority node was taken back
    LOST = "lost"  # its node stopped reporting
    STOPPED = "stopped"  # its compute instance was stopped


# The node went away, not the job: the job is requeued while attempts remain.
REQUEUE_REASONS: frozenset[ExitReason] = frozenset(
    {ExitReason.PREEMPTED, ExitReason.LOST, ExitReason.STOPPED}
)
# Written to ``job_runs.reason`` while the run still runs: its agent is told to stop it, and its
# exit is then recorded as ``canceled``.
CANCEL_REQUESTED = "cancel_requested"
# Written to ``job_runs.reason`` when the scheduler preempts the run's job (fair share, priority):
# its agent stops it as for a cancel (SIGTERM, the grace, then kill), and its exit is recorded as
# ``preempted``, so the job is requeued and resumes from its checkpoint dir.
PREEMPT_REQUESTED = "preempt_requested"
# Either: the run's agent is told to stop it.
STOP_REQUESTED: frozenset[str] = frozenset({CANCEL_REQUESTED, PREEMPT_REQUESTED})

_S = RunState
TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    _S.ASSIGNED: frozenset({_S.SENT, _S.EXITED}),  # exited: canceled before it reached a node
    _S.SENT: frozenset({_S.SENT, _S.RUNNING, _S.EXITED}),  # sent: sent again, its answer lost
    _S.RUNNING: frozenset({_S.EXITED}),
    _S.EXITED: frozenset(),
}
# States of a run that has not ended (its node is still held for it).
LIVE: frozenset[RunState] = frozenset(s for s in RunState if s is not _S.EXITED)
# States a run may be in before its process reported running.
NOT_STARTED: frozenset[RunState] = frozenset({_S.ASSIGNED, _S.SENT})
_VALUES = frozenset(s.value for s in RunState)


class IllegalRunTransition(CloudletError):
    """A move the table does not allow: a bug in the caller, reported as a 409 naming both ends."""


def can_move(current: RunState | str, to: RunState) -> bool:
    try:
        return to in TRANSITIONS[RunState(current)]
    except ValueError:
        return False


def advance(current: RunState | str, to: RunState, run_id: str = "") -> RunState:
    """``to``, when a run that is ``current`` may become it; else ``IllegalRunTransition``."""
    if can_move(current, to):
        return to
    allowed = sorted(TRANSITIONS[RunState(current)]) if current in _VALUES else []
    shown = f"run '{run_id}'" if run_id else "a run"
    raise IllegalRunTransition(
        "RunStateConflict",
        f"{shown} is {current}; it cannot become {to.value} (from {current} it may become "
        f"{', '.join(allowed) or 'nothing: it has ended'})",
        run_id or None,
        409,
    )
