"""Why a queued job waits: its place in its compute's queue and the one reason that holds it.

The facts come from where the scheduler and the autoscaler take them: the queue in the scheduler's
order (``dispatch.queue_in_order``), an instance's free vCPUs as the scheduler counts them, and the
lock and quota limits the autoscaler reads (``services.compute.scaling_limits``, the one function
both call); ``domain.jobs.job_wait`` turns them into a code and a sentence.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from cloudlet.domain.compute import compute_types
from cloudlet.domain.compute.compute_spec import cluster_scaling
from cloudlet.domain.compute.nodes import HOLDING, SERVING, NodeState
from cloudlet.domain.compute.quota import Tier
from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.domain.jobs.job_wait import (
    ClusterFacts,
    InstanceFacts,
    QueuePlace,
    WaitCode,
    WaitReason,
    cluster_reason,
    instance_reason,
)
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.compute.scaling_limits import scaling_limits
from cloudlet.services.jobs import dispatch
from cloudlet.store.schema import Compute, Job, Node

QUEUE_READ = 10_000  # queue rows read to place a job; deeper than that its position is "10,000+"
_STARTING = frozenset({NodeState.REQUESTED, NodeState.ALLOCATED, NodeState.STARTING})


def why_waiting(session: Session, job: Job) -> dict[str, Any] | None:
    """For a queued or preparing job: ``code`` and ``message`` (``domain.jobs.job_wait.WaitCode``),
    its 1-based ``position`` in its compute's queue (None when placed, or deeper than
    ``QUEUE_READ``), the jobs ``ahead`` and the cores they need. None for any other status."""
    if job.status == JobStatus.PREPARING:
        message = job.status_message or "its nodes are being prepared"
        return _answer(WaitReason(WaitCode.PREPARING, message), QueuePlace(None, 0, 0, 0), job)
    if job.status != JobStatus.QUEUED:
        return None
    compute = _compute(session, job)
    place = _place(session, job, compute)
    if job.cancel_requested:
        return _answer(WaitReason(WaitCode.CANCELING, "cancel requested: it leaves the queue"), place, job)
    if compute is None:  # serverless, local, or a compute since deleted: nodes made for the job
        message = job.status_message or "waiting for nodes made for this job"
        return _answer(WaitReason(WaitCode.WAITING_FOR_NODES, message), place, job)
    if compute.type in compute_types.SINGLE_NODE:
        return _answer(instance_reason(place, _instance_facts(session, compute, job)), place, job)
    return _answer(cluster_reason(place, _cluster_facts(session, compute, job)), place, job)


def _answer(reason: WaitReason, place: QueuePlace, job: Job) -> dict[str, Any]:
    return {
        "code": reason.code.value,
        "message": reason.message,
        "position": place.position,
        "ahead": place.ahead,
        "ahead_cores": place.ahead_cores,
        "compute": job.compute_name,
    }


def _compute(session: Session, job: Job) -> Compute | None:
    if job.compute_name is None:
        return None
    return session.scalar(
        select(Compute).where(Compute.workspace_id == job.workspace_id, Compute.name == job.compute_name)
    )


def _place(session: Session, job: Job, compute: Compute | None) -> QueuePlace:
    if job.compute_name is None:
        return QueuePlace(None, 0, 0, 0)
    queue = dispatch.queue_in_order(session, job.workspace_id, job.compute_name, QUEUE_READ)
    index = next((i for i, row in enumerate(queue) if row.id == job.id), None)
    ahead = [row for row in queue[:index] if not row.cancel_requested] if index is not None else queue
    if compute is not None and compute.type in compute_types.SINGLE_NODE:
        # An instance's job takes a vCPU a process (as ``dispatch._schedule_instance`` counts).
        cores = sum(dispatch.processes_per_node(row.spec) for row in ahead)
    else:
        size = catalogue_service.current(session).get(compute.size or "") if compute is not None else None
        cores = sum(row.instance_count for row in ahead) * (size.vcpus if size is not None else 1)
    higher = sum(1 for row in ahead if row.priority > job.priority)
    nodes = sum(row.instance_count for row in ahead)
    # Jobs ahead whose cancel was asked are skipped by the scheduler: they do not count.
    return QueuePlace(None if index is None else len(ahead) + 1, len(ahead), cores, higher, nodes)


def _instance_facts(session: Session, compute: Compute, job: Job) -> InstanceFacts:
    vcpus = dispatch.instance_vcpus(session, compute)
    state = compute.state or "Unknown"
    if vcpus is None:  # no serving node: stopped, or starting though its record may say running
        return InstanceFacts("Starting" if state.lower() == "running" else state, 0, 0, 1)
    total, free = vcpus
    return InstanceFacts(state, total, free, min(dispatch.processes_per_node(job.spec), total))


def _cluster_facts(session: Session, compute: Compute, job: Job) -> ClusterFacts:
    scaling = cluster_scaling(compute.spec)
    counted = session.execute(
        select(Node.state, func.count()).where(node_service.owned_by_compute(compute.id)).group_by(Node.state)
    )
    states: Counter[NodeState] = Counter({NodeState(state): int(count) for state, count in counted})
    limits = scaling_limits(session, compute, Tier(scaling.tier), sum(states[s] for s in HOLDING))
    return ClusterFacts(
        max_instances=scaling.max_instances,
        serving_nodes=sum(states[s] for s in SERVING),
        starting_nodes=sum(states[s] for s in _STARTING),
        idle_nodes=states[NodeState.IDLE],
        job_nodes=job.instance_count,
        lock_reason=limits.blocked_reason,
        quota_nodes=limits.quota_nodes,
        quota_reason=limits.quota_reason,
    )
