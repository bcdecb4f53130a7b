"""The typed vocabularies of issue 26 item 5: a run's state machine and exit reasons
(domain/jobs/run_state.py), and the compute types (domain/compute/compute_types.py)."""

from __future__ import annotations

import pytest

from cloudlet.domain.compute import compute_spec, compute_types, sizes
from cloudlet.domain.compute.compute_types import ComputeType
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs import job_outcome, run_state
from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.domain.jobs.run_state import (
    REQUEUE_REASONS,
    ExitReason,
    IllegalRunTransition,
    RunState,
    advance,
    can_move,
)

R = RunState
LEGAL = [
    (R.ASSIGNED, R.SENT),  # handed to its agent
    (R.ASSIGNED, R.EXITED),  # canceled before it reached a node
    (R.SENT, R.SENT),  # sent again: the agent never reported it
    (R.SENT, R.RUNNING),  # its process reported
    (R.SENT, R.EXITED),  # ended before it reported running
    (R.RUNNING, R.EXITED),
]


@pytest.mark.parametrize(("current", "to"), LEGAL)
def test_every_allowed_move(current: RunState, to: RunState) -> None:
    assert advance(current, to) is to
    assert advance(current.value, to) is to  # the stored string works as well


def test_the_table_allows_exactly_those_moves() -> None:
    allowed = {(a, b) for a, targets in run_state.TRANSITIONS.items() for b in targets}
    assert allowed == set(LEGAL)
    assert set(run_state.TRANSITIONS) == set(RunState)  # every state has a row


@pytest.mark.parametrize(
    ("current", "to"),
    [(a, b) for a in RunState for b in RunState if (a, b) not in LEGAL],
)
def test_every_other_move_is_refused(current: RunState, to: RunState) -> None:
    assert not can_move(current, to)
    with pytest.raises(IllegalRunTransition):
        advance(current, to)


def test_a_refused_move_is_a_409_naming_both_ends() -> None:
    with pytest.raises(CloudletError) as caught:
        advance(R.EXITED, R.RUNNING, "run-1")
    err = caught.value
    assert (err.status, err.code, err.target) == (409, "RunStateConflict", "run-1")
    assert "run 'run-1' is exited; it cannot become running" in err.message
    assert "nothing: it has ended" in err.message
    with pytest.raises(IllegalRunTransition, match="it may become exited, sent"):
        advance(R.ASSIGNED, R.RUNNING)


def test_an_unknown_stored_state_is_refused() -> None:
    assert not can_move("bogus", R.EXITED)
    with pytest.raises(IllegalRunTransition, match="from bogus it may become nothing"):
        advance("bogus", R.EXITED)


def test_values_are_the_stored_strings() -> None:
    assert [s.value for s in RunState] == ["assigned", "sent", "running", "exited"]
    assert {"assigned", "sent", "running"} == run_state.LIVE
    assert {r.value for r in ExitReason} == {
        "exited",
        "canceled",
        "timeout",
        "download_failed",
        "upload_failed",
        "preempted",
        "lost",
        "stopped",
    }
    assert {"preempted", "lost", "stopped"} == REQUEUE_REASONS


@pytest.mark.parametrize("reason", sorted(REQUEUE_REASONS))
def test_requeue_hangs_on_the_exit_reason(reason: ExitReason) -> None:
    """A stored reason (a plain string) requeues the job exactly when it is a REQUEUE_REASONS."""
    ends = [job_outcome.RunEnd(0, None, reason.value)]
    outcome = job_outcome.settle(ends, attempt=1, max_attempts=2, cancel_requested=False, now=1.0)
    assert outcome["status"] is JobStatus.QUEUED
    assert f"node {reason.value}; requeued" in outcome["status_message"]


@pytest.mark.parametrize("reason", [r for r in ExitReason if r not in REQUEUE_REASONS])
def test_other_reasons_do_not_requeue(reason: ExitReason) -> None:
    ends = [job_outcome.RunEnd(0, 1, reason.value)]
    outcome = job_outcome.settle(ends, attempt=1, max_attempts=2, cancel_requested=False, now=1.0)
    assert outcome["status"] is JobStatus.FAILED


def test_compute_type_tuples_derive_from_the_enum() -> None:
    assert [t.value for t in ComputeType] == ["amlcompute", "computeinstance", "virtualmachine", "kubernetes"]
    assert compute_spec.COMPUTE_TYPES == compute_types.ALL == tuple(ComputeType)
    assert sizes.COMPUTE_TYPES_WITH_SIZES == (ComputeType.AMLCOMPUTE, ComputeType.COMPUTE_INSTANCE)
    assert set(compute_types.ATTACHED) | set(compute_types.WITH_SIZES) == set(ComputeType)
    spec = compute_spec.parse_compute({"name": "vm1", "type": "VirtualMachine", "address": "10.0.0.4"})
    assert spec.type == ComputeType.VIRTUAL_MACHINE and type(spec.type) is str  # stored as before
