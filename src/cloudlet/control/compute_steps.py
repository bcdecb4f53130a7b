"""The computes' step set: what each step of a compute operation does to the world, then to the
record (registered with the operation reconciler's ``StepRegistry``, ``control/steps.py``).

Steps here need no node: a cluster's resource is provisioned and its allocation is derived from
``min_instances`` (its nodes are the cluster reconciler's). A compute instance's steps make,
wait for and release its node through ``control/instances.py`` (provider calls tagged with the
operation id, so a retried step finds what it made).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.control.attached_vms import VmDriver
from cloudlet.control.instances import InstanceDriver
from cloudlet.control.steps import Pending, StepOutcome
from cloudlet.domain.compute import attached_vms as vm_rules
from cloudlet.domain.compute.compute_types import ComputeType
from cloudlet.domain.compute.lifecycle import InstanceEvent, ProvisioningState, advance_instance
from cloudlet.domain.compute.nodes import NodeEvent, NodeState
from cloudlet.domain.compute.operation_plans import COMPUTE_PLANS, Plan
from cloudlet.domain.jobs.job_status import ACTIVE as JOB_ACTIVE
from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.domain.jobs.run_state import ExitReason
from cloudlet.domain.resources import COMPUTES
from cloudlet.services.access import workspaces
from cloudlet.services.compute import locks as lock_store
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.core.clock import utcnow
from cloudlet.services.jobs import exits, job_status
from cloudlet.store.schema import Compute, Job, Operation, Workspace

StepFn = Callable[[Session, Operation, Compute], None]


def _instance_event(event: InstanceEvent) -> StepFn:
    def step(_session: Session, _op: Operation, compute: Compute) -> None:
        if compute.type == ComputeType.COMPUTE_INSTANCE:
            compute.state = advance_instance(compute.state, event, compute.name)

    return step


def _settle(_session: Session, _op: Operation, compute: Compute) -> None:
    compute.provisioning_state = ProvisioningState.SUCCEEDED.value


def _finalize_create(session: Session, op: Operation, compute: Compute) -> None:
    _settle(session, op, compute)
    _instance_event(InstanceEvent.CREATED)(session, op, compute)


def _provision(_session: Session, _op: Operation, compute: Compute) -> None:
    compute.errors = []


def _release(session: Session, _op: Operation, compute: Compute) -> None:
    """Give back every node (the cluster reconciler's sweep terminates the machines) and end the
    compute's unfinished jobs: a deleted cluster leaks no node and strands no job."""
    now = time.time()
    active = list(
        session.scalars(
            select(Job).where(
                Job.workspace_id == compute.workspace_id,
                Job.compute_name == compute.name,
                Job.status.in_(job_status.ACTIVE_VALUES),
            )
        )
    )
    for job in active:
        job.cancel_requested = True
    for node in node_service.live_nodes(session, compute.id):
        if node.state != NodeState.TERMINATING.value:
            exits.fail_runs_on_node(session, node, ExitReason.CANCELED, now)
            node_service.advance(node, NodeEvent.TERMINATE, now)
    for job in active:
        if job.status in JOB_ACTIVE:
            job_status.set_status(job, JobStatus.CANCELED, now)
        job.status_message = f"compute '{compute.name}' was deleted"


def _remove(session: Session, _op: Operation, compute: Compute) -> None:
    ws = session.get(Workspace, compute.workspace_id)
    assert ws is not None
    lock_store.remove_scope(session, workspaces.ref_of(session, ws).compute_id(compute.name))
    session.delete(compute)


STEPS: dict[str, StepFn] = {
    "provision": _provision,
    "finalize": _finalize_create,
    "apply": _settle,
    "release": _release,
    "remove": _remove,
    "power_on": _instance_event(InstanceEvent.STARTED),
    "power_off": _instance_event(InstanceEvent.STOPPED),
    "reboot": _instance_event(InstanceEvent.RESTARTED),
}


class ComputeSteps:
    """Compute operations' steps. With an instance driver, compute instances get real nodes;
    without one their steps only move the state machine."""

    resource_type = COMPUTES
    plans: Mapping[str, Plan] = COMPUTE_PLANS

    def __init__(self, instances: InstanceDriver | None = None, vms: VmDriver | None = None) -> None:
        self.instances = instances
        self.vms = vms  # attached VMs' nodes (``control/attached_vms.py``)

    def load(self, session: Session, op: Operation) -> Compute | None:
        return session.get(Compute, op.resource_id) if op.resource_id is not None else None

    def gone(self, op: Operation) -> dict[str, Any]:
        return {"code": "ComputeGone", "message": f"compute '{op.resource_name}' no longer exists"}

    def apply(self, session: Session, op: Operation, step: str, compute: Compute) -> StepOutcome:
        vms = self.vms
        if vms is not None and vm_rules.is_attached(compute.spec) and step in vms.STEPS:
            outcome = vms.step(session, op, step, compute)
            if outcome is not None or step != "remove":
                if not isinstance(outcome, Pending):
                    compute.last_modified_on = utcnow()
                return outcome
        instances = self.instances
        if instances is not None and compute.type == ComputeType.COMPUTE_INSTANCE and step in instances.STEPS:
            outcome = instances.step(session, op, step, compute)
            if outcome is not None or step != "remove":
                if not isinstance(outcome, Pending):
                    compute.last_modified_on = utcnow()
                return outcome
        compute.last_modified_on = utcnow()
        STEPS[step](session, op, compute)
        return None

    def take_after_commit(self) -> list[Callable[[], None]]:
        work = self.instances.take_after_commit() if self.instances is not None else []
        return work + (self.vms.take_after_commit() if self.vms is not None else [])

    def discard(self) -> None:
        if self.instances is not None:
            self.instances.discard()
        if self.vms is not None:
            self.vms.discard()
