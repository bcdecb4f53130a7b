"""The step registry: what each operation step does, per resource type.

An operation targets ``(resource_type, resource_id)``. Each type registers one ``StepSet``: how
to load its target row, the ordered steps of each operation kind (its plans, from
``domain/compute/operation_plans.py``) and what a step does to the world, then to the record. The
operation reconciler looks the type up here and knows nothing about any type; computes are
``control/compute_steps.py``, and a new type (online endpoints, deployments) is one module like
it, registered where the server is built.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from sqlalchemy.orm import Session

from cloudlet.domain.compute.operation_plans import Plan
from cloudlet.store.schema import Operation


@dataclass(frozen=True)
class Pending:
    """The step is not finished; ``reason`` says what it waits for."""

    reason: str


StepOutcome = dict[str, Any] | Pending | None  # None: done; a dict: the operation's error

Target = TypeVar("Target")


class StepSet(Protocol[Target]):
    """One resource type's steps. A step runs inside the reconciler's transaction (lease
    re-asserted, step journalled after it); calls to the world that must wait for that commit are
    queued and handed over by ``take_after_commit``."""

    @property
    def resource_type(self) -> str: ...

    @property
    def plans(self) -> Mapping[str, Plan]: ...

    def load(self, session: Session, op: Operation) -> Target | None:
        """The operation's target row, or None if it no longer exists."""
        ...

    def gone(self, op: Operation) -> dict[str, Any]:
        """The error that ends an operation whose target no longer exists."""
        ...

    def apply(self, session: Session, op: Operation, step: str, target: Target) -> StepOutcome: ...

    def take_after_commit(self) -> list[Callable[[], None]]:
        """Calls the last step asked for, to run now that its transaction committed."""
        ...

    def discard(self) -> None:
        """The last step's transaction did not commit: forget its queued calls."""
        ...


class AfterCommitQueue:
    """The provider calls a driver's last step asked for, held until that step's transaction
    commits (a crash in between leaves the journal to redo the step, not a call made twice)."""

    def __init__(self) -> None:
        self._after: list[Callable[[], None]] = []

    def take_after_commit(self) -> list[Callable[[], None]]:
        """Calls the last step asked for, to run now that its transaction committed."""
        work, self._after = self._after, []
        return work

    def discard(self) -> None:
        """The last step's transaction did not commit: forget its provider calls."""
        self._after = []


class StepRegistry:
    """The step sets a reconciler drives, by resource type."""

    def __init__(self, *step_sets: StepSet[Any]) -> None:
        self._by_type: dict[str, StepSet[Any]] = {}
        for step_set in step_sets:
            self.register(step_set)

    def register(self, step_set: StepSet[Any]) -> None:
        if step_set.resource_type in self._by_type:
            raise ValueError(f"steps for {step_set.resource_type!r} are registered already")
        self._by_type[step_set.resource_type] = step_set

    @property
    def resource_types(self) -> Iterable[str]:
        """The types this registry drives: a replica claims only operations on these (one that
        does not know a type, during a rolling upgrade, leaves its operations to one that does)."""
        return tuple(self._by_type)

    def plan(self, op: Operation) -> Plan:
        return self._by_type[op.resource_type].plans[op.kind]

    def apply(self, session: Session, op: Operation, step: str) -> StepOutcome:
        """Apply OP's STEP: an error body if the operation must fail, ``Pending`` if the step
        waits for the world, None once it is done."""
        step_set = self._by_type[op.resource_type]
        target = step_set.load(session, op)
        if target is None:
            return step_set.gone(op)
        return step_set.apply(session, op, step, target)

    def take_after_commit(self) -> list[Callable[[], None]]:
        return [work for step_set in self._by_type.values() for work in step_set.take_after_commit()]

    def discard(self) -> None:
        for step_set in self._by_type.values():
            step_set.discard()
