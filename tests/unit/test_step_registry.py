"""The step registry's seam (control/steps.py) with a test-only resource type, and the plans in
domain/compute/operation_plans.py: no store, no compute."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

import pytest
from sqlalchemy.orm import Session

from cloudlet.control import compute_steps
from cloudlet.control.compute_steps import ComputeSteps
from cloudlet.control.steps import Pending, StepOutcome, StepRegistry, StepSet
from cloudlet.domain.compute.operation_plans import COMPUTE_PLANS, PLANS, Plan, first_step, step_after
from cloudlet.domain.resources import COMPUTES
from cloudlet.store.schema import Operation

NO_SESSION = cast(Session, None)  # the widget steps keep their rows in memory


class Widgets:
    """A resource type that exists only in this test: its rows are a dict, its steps a log."""

    resource_type = "widgets"
    plans: Mapping[str, Plan] = {"create": ("carve", "paint"), "delete": ("scrap",)}

    def __init__(self) -> None:
        self.rows: dict[int, dict[str, Any]] = {}
        self.done: list[tuple[str, str]] = []
        self.queued: list[Callable[[], None]] = []
        self.discarded = 0

    def load(self, session: Session, op: Operation) -> dict[str, Any] | None:
        return self.rows.get(op.resource_id or -1)

    def gone(self, op: Operation) -> dict[str, Any]:
        return {"code": "WidgetGone", "message": f"widget '{op.resource_name}' no longer exists"}

    def apply(self, session: Session, op: Operation, step: str, widget: dict[str, Any]) -> StepOutcome:
        if step == "paint" and not widget.get("dry"):
            return Pending("the varnish is wet")
        self.done.append((widget["name"], step))
        self.queued.append(lambda: None)
        return None

    def take_after_commit(self) -> list[Callable[[], None]]:
        work, self.queued = self.queued, []
        return work

    def discard(self) -> None:
        self.queued, self.discarded = [], self.discarded + 1


def _op(kind: str, resource_id: int, name: str, resource_type: str = "widgets") -> Operation:
    return Operation(
        id=f"op-{name}",
        resource_type=resource_type,
        resource_id=resource_id,
        resource_name=name,
        kind=kind,
        step=Widgets.plans[kind][0],
    )


def test_a_registered_type_is_driven_through_the_registry() -> None:
    widgets = Widgets()
    widgets.rows[1] = {"name": "w1"}
    registry = StepRegistry(widgets)
    op = _op("create", 1, "w1")

    assert tuple(registry.resource_types) == ("widgets",)
    assert registry.plan(op) == ("carve", "paint")
    assert registry.apply(NO_SESSION, op, "carve") is None
    assert registry.apply(NO_SESSION, op, "paint") == Pending("the varnish is wet")
    widgets.rows[1]["dry"] = True
    assert registry.apply(NO_SESSION, op, "paint") is None
    assert widgets.done == [("w1", "carve"), ("w1", "paint")]
    assert len(registry.take_after_commit()) == 2 and registry.take_after_commit() == []
    registry.discard()
    assert widgets.discarded == 1


def test_a_gone_target_ends_the_operation_with_the_types_error() -> None:
    registry = StepRegistry(Widgets())
    outcome = registry.apply(NO_SESSION, _op("delete", 9, "w9"), "scrap")
    assert outcome == {"code": "WidgetGone", "message": "widget 'w9' no longer exists"}


def test_a_type_registers_once_and_an_unknown_type_has_no_steps() -> None:
    registry = StepRegistry(Widgets())
    with pytest.raises(ValueError, match="widgets"):
        registry.register(Widgets())
    with pytest.raises(KeyError):
        registry.plan(_op("create", 1, "c1", resource_type=COMPUTES))


def test_step_sets_satisfy_the_protocol() -> None:
    step_sets: list[StepSet[Any]] = [Widgets(), ComputeSteps()]
    assert [s.resource_type for s in step_sets] == ["widgets", COMPUTES]


def test_computes_plans_are_the_domains_and_every_step_has_an_effect() -> None:
    assert ComputeSteps.plans is COMPUTE_PLANS is PLANS[COMPUTES]
    steps = {step for plan in COMPUTE_PLANS.values() for step in plan}
    assert steps == set(compute_steps.STEPS)


def test_plans_in_order() -> None:
    assert first_step(COMPUTES, "create") == "provision"
    assert first_step(COMPUTES, "delete") == "release"
    assert step_after(("a", "b", "c"), "a") == "b"
    assert step_after(("a", "b", "c"), "c") is None
    with pytest.raises(ValueError):
        step_after(("a",), "z")
