"""Decide and apply one cluster's size inside its pass's transaction (C7–C12).

The decision itself is pure (``domain.compute.autoscale.decide``); this gathers its inputs (typed
scaling spec, quota and capacity headroom, locks), evicts low-priority nodes when dedicated
demand finds no room, records the intents (new ``requested`` rows, ``terminating`` releases)
and the cluster's status. The provider calls are the caller's to hand over, after commit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from cloudlet.control.actions import Actions, Launch, release
from cloudlet.control.eviction import evict_low_priority
from cloudlet.domain.compute import autoscale
from cloudlet.domain.compute.compute_spec import ClusterScaling, cluster_scaling
from cloudlet.domain.compute.nodes import FAILED, HOLDING, SERVING, NodeState
from cloudlet.domain.compute.quota import Tier
from cloudlet.providers.capacity import CapacityReading, CapacityReadings, free_nodes, location_capacity
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.compute.scaling_limits import scaling_limits
from cloudlet.services.jobs import job_status
from cloudlet.store.schema import Compute, Job, Location, Node, Workspace


@dataclasses.dataclass(frozen=True)
class Scaled:
    """What scaling one cluster left for the loop: the earliest idle node's release time (the
    loop wakes then, C10 precision) and whether it evicted (others may now fit: pass again)."""

    next_due: float | None
    evicted: bool


class ClusterScaler:
    def __init__(
        self,
        installation_id: str,
        server_url: Callable[[], str],
        readings: CapacityReadings | None = None,
    ) -> None:
        self.installation_id = installation_id
        self.server_url = server_url
        # What engines that own their capacity last said (the sweep asks them on their workers).
        self.readings = readings or CapacityReadings()

    def scale(
        self,
        session: Session,
        compute: Compute,
        nodes: list[Node],
        demand: autoscale.Demand,
        now: float,
        actions: Actions,
    ) -> Scaled:
        scaling = cluster_scaling(compute.spec)
        cluster = autoscale.ClusterView(
            compute.name,
            scaling.min_instances,
            scaling.max_instances,
            scaling.idle_time_before_scale_down_s,
        )
        serving_now = len([n for n in nodes if n.state in SERVING])
        wanted = autoscale.cluster_target(cluster, demand)
        # Quota and capacity only matter when the cluster must grow: skip that work otherwise.
        limits = self._limits(session, compute, scaling, nodes, now, need_headroom=wanted > serving_now)
        # Failed nodes whose machine is already released are records only.
        views = [
            autoscale.NodeView(n.id, NodeState(n.state), n.idle_since)
            for n in nodes
            if not (NodeState(n.state) in FAILED and n.ended_at is not None)
        ]
        decision = autoscale.decide(cluster, views, demand, limits, now)
        short = min(decision.target - serving_now, limits.quota_nodes)
        freed = 0
        if short > decision.launch and limits.capacity_nodes < short and not limits.blocked_reason:
            size = catalogue_service.current(session).get(compute.size or "")
            if scaling.tier == Tier.DEDICATED.value and size is not None:
                needed = (short - decision.launch) * size.vcpus
                freed = evict_low_priority(session, compute.location, compute.name, needed, actions, now)
            if freed and size is not None:
                # Claim the freed capacity in this same transaction: left for the next pass, a
                # low-priority cluster reconciled first takes it back and is evicted again, forever.
                extra = freed // size.vcpus
                limits = dataclasses.replace(limits, capacity_nodes=limits.capacity_nodes + extra)
                decision = autoscale.decide(cluster, views, demand, limits, now)
        self._apply(session, compute, scaling, nodes, decision, actions, now)
        _record_capacity(compute, decision.target - serving_now, limits)
        serving = [n for n in nodes if n.state in SERVING]
        compute.current_node_count = len([n for n in serving if n.state in ("idle", "busy")])
        compute.target_node_count = decision.target
        compute.scale_message = decision.explanation
        message = None
        if limits.blocked_reason:
            message = f"waiting: {limits.blocked_reason}"
        elif decision.launch == 0 and len(serving) < decision.target:
            message = f"waiting for nodes: {decision.explanation}"
        if message and demand.queued:
            session.execute(
                update(Job)
                .where(
                    Job.workspace_id == compute.workspace_id,
                    Job.compute_name == compute.name,
                    Job.status == job_status.QUEUED,
                    Job.attempt == 0,  # a requeued job keeps saying why it was requeued
                    or_(Job.status_message.is_(None), Job.status_message != message),
                )
                .values(status_message=message)
            )
        return Scaled(_next_release(cluster, views, now), evicted=freed > 0)

    def _limits(
        self,
        session: Session,
        compute: Compute,
        scaling: ClusterScaling,
        nodes: list[Node],
        now: float,
        need_headroom: bool = True,
    ) -> autoscale.Limits:
        live = len([n for n in nodes if n.state in HOLDING])
        limits = scaling_limits(session, compute, Tier(scaling.tier), live, need_headroom)
        size = limits.size
        if size is None:
            return autoscale.Limits(
                0, "unknown size", blocked_reason=f"size {compute.size} is not in the catalogue"
            )
        if not need_headroom:
            return autoscale.Limits(1 << 30, blocked_reason=limits.blocked_reason)
        reading = self.readings.get(compute.location)
        capacity_nodes, capacity_reason = _capacity(session, compute.location, size.vcpus, reading, now)
        return autoscale.Limits(
            limits.quota_nodes,
            limits.quota_reason,
            capacity_nodes,
            capacity_reason,
            blocked_reason=limits.blocked_reason,
        )

    def _apply(
        self,
        session: Session,
        compute: Compute,
        scaling: ClusterScaling,
        nodes: list[Node],
        decision: autoscale.Decision,
        actions: Actions,
        now: float,
    ) -> None:
        size = catalogue_service.current(session).get(compute.size or "")
        for _ in range(decision.launch if size else 0):
            assert size is not None
            node, token = node_service.new_node(
                session,
                owner=compute,
                installation_id=self.installation_id,
                location=compute.location,
                size=size,
                tier=scaling.tier,
                now=now,
            )
            request = node_service.launch_request(node, token, self.installation_id, self.server_url())
            actions.launches.append(Launch(node.id, request, compute.location))
        by_id = {n.id: n for n in nodes}
        for node_id in decision.terminate:
            release(by_id[node_id], actions, now)


def _record_capacity(compute: Compute, short: int, limits: autoscale.Limits) -> None:
    """Keep a ``NoCapacity`` warning on the compute while the location cannot give the nodes it
    wants (the decision's own "scale-up blocked" test), with how many more fit: a queued job's
    reason (``queue_snapshots``) says what this pass decided, whichever process shows it."""
    kept = [
        w
        for w in compute.warnings or []
        if not (isinstance(w, dict) and w.get("code") == autoscale.NO_CAPACITY)
    ]
    if short > 0 and limits.capacity_nodes < short and not limits.blocked_reason:
        warning = {
            "code": autoscale.NO_CAPACITY,
            "message": limits.capacity_reason,
            "nodes": limits.capacity_nodes,
        }
        kept.append(warning)
    if kept != (compute.warnings or []):
        compute.warnings = kept


def _next_release(
    cluster: autoscale.ClusterView, views: list[autoscale.NodeView], now: float
) -> float | None:
    """When the next idle node is due for release (not sooner than 50 ms from now)."""
    due: float | None = None
    for view in views:
        if view.state is NodeState.IDLE and view.idle_since is not None:
            at = max(view.idle_since + cluster.idle_time_before_scale_down_s, now + 0.05)
            due = at if due is None else min(due, at)
    return due


def workspace_of(session: Session, workspace_id: int) -> Workspace:
    ws = session.get(Workspace, workspace_id)
    assert ws is not None
    return ws


def _capacity(
    session: Session, location: str, vcpus: int, reading: CapacityReading | None, now: float
) -> tuple[int, str]:
    """Nodes of ``vcpus`` that still fit in the location: its engine's latest offer when it owns
    its capacity, else the stored capacity (``providers.capacity``)."""
    capacity = location_capacity(session.get(Location, location), reading, now)
    used = sum(
        session.scalars(
            select(Node.vcpus).where(Node.location == location, Node.state.in_([s.value for s in HOLDING]))
        )
    )
    return free_nodes(capacity, used, vcpus, location)
