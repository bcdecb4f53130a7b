"""Nodes made for one job and released after it: serverless jobs (C15) and ``compute: local`` (T2).

A serverless job names ``resources.instance_type`` and ``instance_count`` instead of a compute;
its nodes come from the workspace's location within quota. A ``local`` job runs on this host
(the server's), on one node the size of the machine, outside quota. Either way the nodes are
made when the job is queued, the job is placed once all of them registered, and they are
terminated as soon as it ends.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.control.actions import Actions, Launch, release
from cloudlet.control.context import PassContext
from cloudlet.control.loop import one_item
from cloudlet.domain.compute.compute_types import ComputeType
from cloudlet.domain.compute.node_address import node_address
from cloudlet.domain.compute.nodes import HOLDING, NodeState
from cloudlet.domain.compute.quota import Tier
from cloudlet.domain.compute.sizes import VmSize
from cloudlet.domain.errors import failure_text
from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.services.access import workspaces
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.compute import quotas
from cloudlet.services.jobs import dispatch, job_status, prepared_specs, run_specs
from cloudlet.services.jobs import jobs as job_service
from cloudlet.store import db
from cloudlet.store.schema import Job, Node, Workspace

LEASE = "ephemeral-jobs"

log = logging.getLogger("cloudlet.serverless")


def host_size() -> VmSize:
    """``compute: local``: one node the size of this machine."""
    vcpus = os.cpu_count() or 1
    memory_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    return VmSize(
        name="local",
        series="local",
        family="local",
        vcpus=vcpus,
        memory_gb=memory_gb,
        gpus=0,
        gpu_model=None,
        gpu_architecture=None,
        temp_disk_gb=0,
        max_data_disks=0,
        price_dedicated=0.0,
        price_low_priority=None,
        isolated=False,
        rdma=False,
        premium_io=False,
        custom=True,
    )


def reconcile(owner: PassContext, now: float) -> Actions:
    actions = Actions()
    token = owner.leases.token(LEASE, now)
    if token is None or not _any_work(owner):
        return actions
    prepared = _prepare(owner)  # the run specs of jobs about to be placed: built before the lock
    with owner.sessions.begin() as session:
        if not owner.leases.still_held(session, LEASE, token):
            return actions
        prepared_specs.install(session, prepared, inline=True)  # this pass must make progress
        jobs = list(session.scalars(_ACTIVE_JOBS))
        keys = {j.id for j in jobs}
        nodes = list(session.scalars(_JOB_NODES))
        by_job: dict[int | None, list[Node]] = {}
        for node in nodes:
            by_job.setdefault(node.owner_id, []).append(node)
        # Each node, job and ended job's nodes is its own (``one_item``): one in an impossible
        # state says why on itself, and the others go on.
        actions.wake += owner.recorder.record(session, nodes, now)
        for job in jobs:
            undo = _undo(session, actions)
            with one_item(f"the serverless pass for job {job.name}", session, _on_failure(job, undo), log):
                _advance(owner, session, job, by_job.get(job.id, []), actions, now)
        for key, job_nodes in by_job.items():
            if key not in keys:  # the job ended: its nodes go
                undo = _undo(session, actions)
                with one_item(f"releasing the nodes of job #{key}", session, undo, log):
                    _release(job_nodes, actions, now)
    actions.deliveries = dispatch.deliveries(session)
    return actions


def _any_work(owner: PassContext) -> bool:
    """Whether a serverless or local job is active or a job's node is left: read without the
    write lock, so a server that runs none (most passes of most servers) writes nothing here."""
    with db.read_only(owner.sessions) as reads:
        return reads.scalar(_ANY_ACTIVE_JOB) is not None or reads.scalar(_ANY_JOB_NODE) is not None


_ACTIVE = (
    Job.compute_name.in_((job_service.SERVERLESS, job_service.LOCAL_COMPUTE)),
    Job.status.in_(job_status.ACTIVE_VALUES),
)
_ACTIVE_JOBS = select(Job).where(*_ACTIVE)
_ANY_ACTIVE_JOB = select(Job.id).where(*_ACTIVE).limit(1)
_LEFT = (node_service.OWNED_BY_A_JOB, Node.state != NodeState.TERMINATED.value)
# In creation order: the job's first idle nodes are the ones both the preparing read and the
# placing pass pick.
_JOB_NODES = select(Node).where(*_LEFT).order_by(Node.created_at, Node.id)
_ANY_JOB_NODE = select(Node.id).where(*_LEFT).limit(1)


def _prepare(owner: PassContext) -> dict[prepared_specs.Key, prepared_specs.Prepared]:
    """Read without the write lock which queued jobs have all their nodes idle (the ones this
    pass places), and build their run specs there; the pass re-checks under the lock that the job
    is still queued at that attempt on those nodes (``services/jobs/prepared_specs.py``)."""
    prepared: dict[prepared_specs.Key, prepared_specs.Prepared] = {}
    with prepared_specs.read_only(owner.sessions) as reads:
        queued = [
            j for j in reads.scalars(_ACTIVE_JOBS) if j.status == JobStatus.QUEUED and not j.cancel_requested
        ]
        if not queued:
            return prepared
        idle: dict[int | None, list[Node]] = {}
        for node in reads.scalars(_JOB_NODES):
            if node.state == NodeState.IDLE.value:
                idle.setdefault(node.owner_id, []).append(node)
        for job in queued:
            nodes = idle.get(job.id, [])[: job.instance_count]
            if job.instance_count and len(nodes) == job.instance_count:
                number = job.attempt + 1
                attempt = run_specs.Attempt(job.name, job.workspace_id, job.compute_name, job.spec, number)
                targets = [(n.id, node_address(n.resources) or "") for n in nodes]
                made = dispatch.build(reads, attempt, targets, owner.data, owner.server_url(), None).encode()
                prepared[prepared_specs.key(job.id, number, [n.id for n in nodes])] = made
    return prepared


def _undo(session: Session, actions: Actions) -> Callable[[Exception | None], None]:
    """Forget what an item queued from here on (its writes were rolled back): its actions and
    the run specs placing it queued for delivery."""
    mark = actions.mark()
    queued = len(session.info.get(dispatch.DELIVERIES, []))

    def undo(_failure: Exception | None = None) -> None:
        actions.rewind(mark)
        del session.info.get(dispatch.DELIVERIES, [])[queued:]

    return undo


def _on_failure(job: Job, undo: Callable[[Exception | None], None]) -> Callable[[Exception], None]:
    def record(exc: Exception) -> None:
        undo(exc)
        job.status_message = f"waiting: its nodes could not be arranged ({failure_text(exc)})"

    return record


def _advance(
    owner: PassContext, session: Session, job: Job, nodes: list[Node], actions: Actions, now: float
) -> None:
    live = [n for n in nodes if n.state in HOLDING]
    if job.status != JobStatus.QUEUED:
        return
    if job.cancel_requested:
        job_status.set_status(job, JobStatus.CANCELED, now)
        return
    broken = [n for n in nodes if n.state not in HOLDING and n.state != NodeState.TERMINATING.value]
    _release(broken, actions, now)
    idle = [n for n in live if n.state == NodeState.IDLE.value]
    if len(idle) >= job.instance_count:
        actions.wake += dispatch.place(
            session, job, idle[: job.instance_count], owner.data, owner.server_url()
        )
        return
    missing = job.instance_count - len(live)
    if missing <= 0:
        job.status_message = f"waiting for {job.instance_count - len(idle)} node(s) to start"
        return
    size, tier, reason = _size_and_quota(session, job, missing)
    if size is None:
        job.status_message = f"waiting: {reason}"
        return
    ws = session.get(Workspace, job.workspace_id)
    assert ws is not None
    for _ in range(missing):
        node, node_token = node_service.new_node(
            session,
            owner=job,
            installation_id=owner.installation_id,
            location=ws.location,
            size=size,
            tier=tier,
            now=now,
        )
        request = node_service.launch_request(node, node_token, owner.installation_id, owner.server_url())
        actions.launches.append(Launch(node.id, request, ws.location))
    job.status_message = f"making {missing} node(s) of {size.name} for this job"


def _size_and_quota(session: Session, job: Job, missing: int) -> tuple[VmSize | None, str, str]:
    if job.compute_name == job_service.LOCAL_COMPUTE:
        return host_size(), Tier.DEDICATED, ""
    catalogue = catalogue_service.current(session)
    resources = job.spec.get("resources") or {}
    size = catalogue.require_size(str(resources.get("instance_type")), ComputeType.AMLCOMPUTE)
    tier = (
        Tier.LOW_PRIORITY
        if (job.spec.get("queue_settings") or {}).get("job_tier") == "spot"
        else Tier.DEDICATED
    )
    ws = session.get(Workspace, job.workspace_id)
    assert ws is not None
    ref = workspaces.ref_of(session, ws)
    fits, reason = quotas.headroom_for_nodes(
        session, ref.subscription_id, ws.location, catalogue, size.vcpus, size.family, tier
    )
    if fits < missing:
        return None, tier.value, reason
    return size, tier.value, ""


def _release(nodes: list[Node], actions: Actions, now: float) -> None:
    for node in nodes:
        release(node, actions, now)
