"""The steps each kind of operation runs, per resource type: fixed sequences the reconciler
journals one by one. What a step does is the type's step set (``control/steps.py``); which steps
and in what order is plain data here, so services can start an operation without the control
plane and a step set's plans can be checked without a store."""

from __future__ import annotations

from collections.abc import Mapping

from cloudlet.domain.resources import COMPUTES

Plan = tuple[str, ...]

COMPUTE_PLANS: Mapping[str, Plan] = {
    "create": ("provision", "finalize"),
    "update": ("apply",),
    "delete": ("release", "remove"),
    "start": ("power_on",),
    "stop": ("power_off",),
    "restart": ("reboot",),
}

PLANS: Mapping[str, Mapping[str, Plan]] = {COMPUTES: COMPUTE_PLANS}


def first_step(resource_type: str, kind: str) -> str:
    return PLANS[resource_type][kind][0]


def step_after(plan: Plan, step: str) -> str | None:
    """The step that follows STEP in PLAN, or None when STEP is the last."""
    index = plan.index(step) + 1
    return plan[index] if index < len(plan) else None
