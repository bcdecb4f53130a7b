"""Jobs that run other jobs (pure): a pipeline's steps and a sweep's trials are child jobs.

A parent job (``JobKind.PIPELINE``, ``JobKind.SWEEP``) never takes a node. A control loop
(``control/parent_jobs.py``) reads each active parent and its children, asks the parent's kind what
to do next (``ParentKind.advance``: a pure function of the parent's stored document and what its
children did), and carries the answer out: it submits the new children (command jobs, placed and
run like any other), cancels the ones named, and settles the parent when the answer says it is
over. Nothing about progress is stored beside the children themselves: which steps ran, which
trials were stopped, the best trial so far are all read back from the children on every pass, so
a restart loses nothing and a pass can be repeated.

A child is known to its parent by its ``key`` (``jobs.child_key``): the step's name in a pipeline,
the trial's number in a sweep. A key is submitted once per parent: a pass that asks for a key
already present is ignored, which makes a repeated pass harmless.

Step reuse (pipelines): a ``NewChild`` with a ``reuse_key`` (a hash of what determines the step's
outputs: component, environment, code, inputs) is not run when a Completed job of the same
workspace has that key and the parent does not force a rerun: the child is recorded Completed at
once with ``reused_from`` naming that job, and its outputs are that job's outputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from cloudlet.domain.jobs.job_status import FINAL, JobStatus

# The error code of a child stopped by its parent's early-termination policy (a sweep's trial), which
# ``services.jobs.parent_jobs`` writes and ``services.jobs.sweeps.view`` reads back.
EARLY_TERMINATED = "EarlyTerminated"


@dataclass(frozen=True)
class ChildView:
    """What the loop tells a parent's kind about one of its children."""

    key: str  # the step's name / the trial's number
    name: str  # the child job's name
    status: JobStatus
    # Output name → the path the child's output was given (a datastore URI such as
    # ``azureml://datastores/workspaceblobstore/paths/...``): what a later step binds to.
    outputs: Mapping[str, str] = field(default_factory=dict)
    # Literal inputs the child was given (a sweep trial's sampled hyperparameters).
    inputs: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None  # why it failed, in words (its status message / error)
    reused_from: str | None = None  # the earlier job whose outputs a reused step took
    started_at: float | None = None
    ended_at: float | None = None
    # Metric key → [(step, value), …] in step order, for the keys ``ParentKind.metric_keys``
    # names (a sweep's primary metric); empty for kinds that name none.
    metrics: Mapping[str, Sequence[tuple[int, float]]] = field(default_factory=dict)
    exit_code: int | None = None  # its process's exit code, once it has one


@dataclass(frozen=True)
class NewChild:
    """A child to submit: a command job document in the shape ``job_spec.parse_job`` accepts."""

    key: str
    doc: dict[str, Any]
    reuse_key: str | None = None  # None: never reused (e.g. a non-deterministic component)


@dataclass(frozen=True)
class ParentStep:
    """What to do for a parent on this pass. ``outcome`` set: the parent is over (once the
    children it cancels have stopped, the loop settles it with ``outcome`` and ``message``)."""

    submit: tuple[NewChild, ...] = ()
    cancel: tuple[str, ...] = ()  # keys of active children to cancel
    cancel_reason: str = ""  # why, for every key without its own reason in ``reasons``
    reasons: Mapping[str, str] = field(default_factory=dict)  # key → why that child is stopped
    outcome: JobStatus | None = None  # COMPLETED, FAILED or CANCELED
    message: str | None = None
    # Words for the parent's status while it runs ("2 of 4 steps done", "best trial 3: 0.91").
    progress: str | None = None


@dataclass(frozen=True)
class ParentContext:
    """The facts a kind may need beyond its document and children."""

    now: float
    started_at: float  # when the parent began (its first pass)
    cancel_requested: bool = False


class ParentKind(Protocol):
    """One kind of parent job. ``parse`` validates a submitted document and returns its stored
    form (errors: ``CloudletError`` naming the field); ``advance`` decides a pass."""

    def parse(self, doc: Any, name: str) -> dict[str, Any]: ...

    def metric_keys(self, doc: Mapping[str, Any]) -> Sequence[str]: ...

    def advance(
        self, doc: Mapping[str, Any], children: Sequence[ChildView], context: ParentContext
    ) -> ParentStep: ...


def settled(children: Sequence[ChildView]) -> bool:
    """Every child has ended."""
    return all(child.status in FINAL for child in children)
