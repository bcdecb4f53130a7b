"""The cluster reconciler: record what the world did, schedule, decide, then act.

One pass per cluster, under the named lease ``compute:<id>`` so one replica drives a cluster:
1. record — nodes whose agent went quiet are lost; provider machines that vanished are lost;
   their runs end and their jobs are requeued;
2. schedule — queued jobs go onto idle nodes (priority, FIFO, backfill, all-or-nothing);
3. decide — ``domain.autoscale.decide`` over plain data (quota, capacity, locks included);
4. act — new node rows are committed first (state ``requested``), then the provider is called;
   nodes to release are marked ``terminating`` first, then terminated. A crash between the two
   leaves a record the next pass (or the orphan sweep) finishes.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import case, func, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.control import ephemeral
from cloudlet.control.actions import Actions, Launch, launch_node, release, terminate_node
from cloudlet.domain import autoscale
from cloudlet.domain.lifecycle import ProvisioningState
from cloudlet.domain.locks import scaling_block
from cloudlet.domain.nodes import FAILED, HOLDING, SERVING, NodeEvent, NodeState
from cloudlet.domain.quota import Tier
from cloudlet.providers.base import NodeHandle, NodeProvider
from cloudlet.services import audit, dispatch, job_status, leases, quotas, workspaces
from cloudlet.services import catalogue as catalogue_service
from cloudlet.services import locks as lock_store
from cloudlet.services import nodes as node_service
from cloudlet.services.notify import NodeNotifier
from cloudlet.services.storage import DataRoot
from cloudlet.store.schema import Compute, Job, Location, Node, Workspace

log = logging.getLogger("cloudlet.clusters")

LOST_AFTER_S = 15.0  # no poll for this long: the agent is gone
START_TIMEOUT_S = 60.0  # no registration for this long: setup failed
SWEEP_EVERY_S = 2.0
MIN_PASS_INTERVAL_S = 0.1


class ClusterReconciler:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        replica_id: str,
        installation_id: str,
        providers: Mapping[str, NodeProvider],
        notifier: NodeNotifier,
        data: DataRoot,
        server_url: Callable[[], str],
        poll_s: float = 1.0,
        lease_ttl_s: float = 10.0,
    ) -> None:
        self.sessions = sessions
        self.replica_id = replica_id
        self.installation_id = installation_id
        self.providers = providers
        self.notifier = notifier
        self.data = data
        self.server_url = server_url
        self.poll_s = poll_s
        self.lease_ttl_s = lease_ttl_s
        self.wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_sweep = 0.0
        self._alive: dict[str, set[str]] = {}
        self._swept_at: dict[str, float] = {}
        # After a restart, agents need a moment to find us again before silence means "lost".
        self._started = time.time()
        self._next_due = 0.0
        self._held: dict[str, tuple[int, float]] = {}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="cluster-reconciler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            began = time.time()
            self._next_due = began + self.poll_s
            try:
                self.run_once(began)
            except Exception:
                log.exception("cluster pass failed")
            self.wake.wait(max(0.0, min(self._next_due - time.time(), self.poll_s)))
            self.wake.clear()
            # A burst of wake-ups (hundreds of submissions) costs one pass per interval, not one
            # pass each: placement already happened inline; a pass only makes or releases nodes.
            self._stop.wait(max(0.0, began + MIN_PASS_INTERVAL_S - time.time()))

    def run_once(self, now: float) -> None:
        if now - self._last_sweep >= SWEEP_EVERY_S:
            self._sweep(now)
            self._last_sweep = now
        with self.sessions() as session:
            ids = list(session.scalars(select(Compute.id).where(Compute.type == "amlcompute")))
            demands = _demands(session) if ids else {}
        for compute_id in ids:
            token = self.lease(f"compute:{compute_id}", now)
            if token is None:
                continue
            try:  # one cluster's failure is its own: the others still scale
                self._carry_out(self._reconcile(compute_id, token, now, demands))
            except Exception as exc:
                log.exception("cluster pass failed for compute %s", compute_id)
                self._record_failure(compute_id, exc)
        self._carry_out(ephemeral.reconcile(self, now))

    def _record_failure(self, compute_id: int, exc: Exception) -> None:
        """Put the failed pass on the cluster's own status (``provisioning_errors``) and in the
        audit log as an event, once per distinct error; the next successful pass clears it."""
        error = reconcile_error(exc)
        try:
            with self.sessions.begin() as session:
                compute = session.get(Compute, compute_id)
                if compute is not None and error not in (compute.errors or []):
                    compute.errors = [*without_reconcile_error(compute.errors), error]
                    ref = workspaces.ref_of(session, _workspace(session, compute.workspace_id))
                    target = ref.compute_id(compute.name)
                    audit.record(
                        session, audit.system("autoscaler"), "compute.reconcileFailed", target, error
                    )
        except Exception:
            log.exception("could not record the failed pass of compute %s", compute_id)

    # -- record + schedule + decide, in one transaction ----------------------------------------
    def _reconcile(
        self, compute_id: int, token: int, now: float, demands: dict[tuple[int, str], autoscale.Demand]
    ) -> Actions:
        actions = Actions()
        with self.sessions.begin() as session:
            if not leases.still_held(session, f"compute:{compute_id}", self.replica_id, token):
                self._held.pop(f"compute:{compute_id}", None)
                return actions
            compute = session.get(Compute, compute_id)
            if compute is None:
                return actions
            if any(e.get("code") == RECONCILE_FAILED for e in compute.errors or []):
                compute.errors = without_reconcile_error(compute.errors)  # recovered (committed if it holds)
            nodes = node_service.live_nodes(session, compute.id, for_pass=True)
            actions.wake += self.record_nodes(session, nodes, now)
            if compute.provisioning_state == ProvisioningState.DELETING.value:
                self._release_all(nodes, actions)
                return actions
            actions.wake += self._schedule(session, compute)
            demand = demands.get((compute.workspace_id, compute.name), autoscale.Demand())
            self._decide(session, compute, nodes, demand, now, actions)
        actions.deliveries = dispatch.deliveries(session)  # committed: hand them to the agents
        return actions

    def record_nodes(self, session: Session, nodes: list[Node], now: float) -> list[str]:
        wake: list[str] = []
        for node in nodes:
            state = NodeState(node.state)
            quiet = now - max(node.last_heartbeat or node.registered_at or now, self._started)
            gone = self._vanished(node)
            if state in (NodeState.IDLE, NodeState.BUSY, NodeState.DRAINING) and (
                quiet > LOST_AFTER_S or gone
            ):
                node.error = {
                    "code": "NodeLost",
                    "message": "the node's agent stopped reporting"
                    if not gone
                    else "the node's machine is gone",
                }
                node_service.advance(node, NodeEvent.LOSE, now)
                wake += dispatch.fail_runs_on_node(session, node, "lost", now)
            elif state is NodeState.STARTING and (now - node.created_at > START_TIMEOUT_S or gone):
                node.error = {
                    "code": "NodeSetupFailed",
                    "message": "the agent did not register; see the node's agent.log",
                }
                node_service.advance(node, NodeEvent.SETUP_FAIL, now)
        return wake

    def lease(self, name: str, now: float) -> int | None:
        """A lease held with more than half its time left is used as is (no store round trip);
        every pass still re-asserts it inside its transaction, so fencing holds."""
        held = self._held.get(name)
        if held is not None and held[1] - now > self.lease_ttl_s / 2:
            return held[0]
        token = leases.acquire(self.sessions, name, self.replica_id, self.lease_ttl_s)
        if token is None:
            self._held.pop(name, None)
        else:
            self._held[name] = (token, now + self.lease_ttl_s)
        return token

    def forget_lease(self, name: str) -> None:
        self._held.pop(name, None)

    def _vanished(self, node: Node) -> bool:
        """Known to the store, made by the provider before its last listing, absent from that listing."""
        swept = self._swept_at.get(node.provider)
        if not node.provider_ref or swept is None or node.created_at > swept - 1.0:
            return False
        return node.id not in self._alive.get(node.provider, set())

    def _schedule(self, session: Session, compute: Compute) -> list[str]:
        return dispatch.schedule_compute(session, compute, self.data, self.server_url())

    def _decide(
        self,
        session: Session,
        compute: Compute,
        nodes: list[Node],
        demand: autoscale.Demand,
        now: float,
        actions: Actions,
    ) -> None:
        spec = compute.spec
        cluster = autoscale.ClusterView(
            compute.name,
            spec.get("min_instances", 0),
            spec.get("max_instances", 1),
            float(spec.get("idle_time_before_scale_down", 120)),
        )
        serving_now = len([n for n in nodes if n.state in SERVING])
        wanted = autoscale.cluster_target(cluster, demand)
        # Quota and capacity only matter when the cluster must grow: skip that work otherwise.
        limits = self._limits(session, compute, nodes, need_headroom=wanted > serving_now)
        # Failed nodes whose machine is already released are records only.
        views = [
            autoscale.NodeView(n.id, NodeState(n.state), n.idle_since)
            for n in nodes
            if not (NodeState(n.state) in FAILED and n.ended_at is not None)
        ]
        decision = autoscale.decide(cluster, views, demand, limits, now)
        short = min(decision.target - len([n for n in nodes if n.state in SERVING]), limits.quota_nodes)
        if short > decision.launch and limits.capacity_nodes < short and not limits.blocked_reason:
            freed = self._evict_low_priority(session, compute, short - decision.launch, actions, now)
            size = catalogue_service.current(session).get(compute.size or "")
            if freed and size is not None:
                # Claim the freed capacity in this same transaction: left for the next pass, a
                # low-priority cluster reconciled first takes it back and is evicted again, forever.
                extra = freed // size.vcpus
                limits = dataclasses.replace(limits, capacity_nodes=limits.capacity_nodes + extra)
                decision = autoscale.decide(cluster, views, demand, limits, now)
        self._apply(session, compute, nodes, decision, actions, now)
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
        self._note_deadlines(cluster, views, now)

    def _note_deadlines(
        self, cluster: autoscale.ClusterView, views: list[autoscale.NodeView], now: float
    ) -> None:
        """The loop sleeps until the next idle node is due for release (C10 precision)."""
        for view in views:
            if view.state is NodeState.IDLE and view.idle_since is not None:
                due = view.idle_since + cluster.idle_time_before_scale_down_s
                self._next_due = min(self._next_due, max(due, now + 0.05))

    def _evict_low_priority(
        self, session: Session, compute: Compute, nodes_short: int, actions: Actions, now: float
    ) -> int:
        """C12: dedicated demand takes capacity back from low-priority nodes in the same location,
        idle ones first; their jobs are requeued. Returns the vCPUs freed (the caller claims them)."""
        if compute.spec.get("tier", "dedicated") != "dedicated":
            return 0
        size = catalogue_service.current(session).get(compute.size or "")
        if size is None:
            return 0
        victims = list(
            session.scalars(
                select(Node).where(
                    Node.location == compute.location,
                    Node.tier == Tier.LOW_PRIORITY.value,
                    Node.state.in_([NodeState.IDLE.value, NodeState.BUSY.value, NodeState.STARTING.value]),
                )
            )
        )
        victims.sort(key=lambda n: (n.state != NodeState.IDLE.value, -(n.created_at or 0)))
        needed, freed = nodes_short * size.vcpus, 0
        for node in victims:
            if freed >= needed:
                break
            node.error = {"code": "Preempted", "message": f"evicted for dedicated demand of '{compute.name}'"}
            node_service.advance(node, NodeEvent.PREEMPT, now)
            actions.wake += dispatch.fail_runs_on_node(session, node, "preempted", now)
            release(node, actions, now)
            freed += node.vcpus
        if freed:
            log.info("evicted %d low-priority vCPUs for %s", freed, compute.name)
            self.wake.set()
        return freed

    def _limits(
        self, session: Session, compute: Compute, nodes: list[Node], need_headroom: bool = True
    ) -> autoscale.Limits:
        ref = workspaces.ref_of(session, _workspace(session, compute.workspace_id))
        block = scaling_block(lock_store.effective(session, ref), ref.arm_id)
        catalogue = catalogue_service.current(session)
        size = catalogue.get(compute.size or "")
        if size is None:
            return autoscale.Limits(
                0, "unknown size", blocked_reason=f"size {compute.size} is not in the catalogue"
            )
        blocked = block.reason if block else None
        if not need_headroom:
            return autoscale.Limits(1 << 30, blocked_reason=blocked)
        tier = Tier(compute.spec.get("tier", "dedicated"))
        live = len([n for n in nodes if n.state in HOLDING])
        quota_nodes, quota_reason = quotas.headroom_nodes(
            session,
            ref.subscription_id,
            compute.location,
            catalogue,
            compute,
            size.vcpus,
            size.family,
            tier,
            live,
        )
        capacity_nodes, capacity_reason = _capacity(session, compute.location, size.vcpus)
        return autoscale.Limits(
            quota_nodes,
            quota_reason,
            capacity_nodes,
            capacity_reason,
            blocked_reason=blocked,
        )

    def _apply(
        self,
        session: Session,
        compute: Compute,
        nodes: list[Node],
        decision: autoscale.Decision,
        actions: Actions,
        now: float,
    ) -> None:
        catalogue = catalogue_service.current(session)
        size = catalogue.get(compute.size or "")
        provider = compute.location  # the node's provider is its location's (ProviderSet's key)
        for _ in range(decision.launch if size else 0):
            assert size is not None
            node, token = node_service.new_node(
                session,
                owner=compute,
                installation_id=self.installation_id,
                location=compute.location,
                provider=provider,
                size=size,
                tier=compute.spec.get("tier", "dedicated"),
            )
            request = node_service.launch_request(node, token, self.installation_id, self.server_url())
            actions.launches.append(Launch(node.id, request, provider))
        by_id = {n.id: n for n in nodes}
        for node_id in decision.terminate:
            release(by_id[node_id], actions, now)

    def _release_all(self, nodes: list[Node], actions: Actions) -> None:
        for node in nodes:
            release(node, actions)

    # -- act ------------------------------------------------------------------------------------
    def _carry_out(self, actions: Actions) -> None:
        self.notifier.deliver(actions.deliveries)
        for node_id in actions.wake:
            self.notifier.notify(node_id)
        for launch in actions.launches:
            self._launch(launch)
        for node_id, provider, ref in actions.terminations:
            self._terminate(node_id, provider, ref)

    def _launch(self, launch: Launch) -> None:
        launch_node(self.providers, self.sessions, launch.provider, launch.request)

    def _terminate(self, node_id: str, provider: str, ref: dict[str, object]) -> None:
        terminate_node(self.providers, self.sessions, node_id, provider, ref)

    # -- orphans and vanished machines ----------------------------------------------------------
    def _sweep(self, now: float) -> None:
        for kind, provider in self.providers.items():
            try:
                handles = provider.list_nodes(self.installation_id)
            except Exception:
                log.exception("listing %s nodes failed", kind)
                continue
            alive = {h.node_id for h in handles}
            self._alive[kind], self._swept_at[kind] = alive, now
            with self.sessions() as session:
                known = dict(session.execute(select(Node.id, Node.state).where(Node.id.in_(alive))).all())
            for handle in handles:
                state = known.get(handle.node_id)
                if state is None or NodeState(state) not in HOLDING:
                    log.info("terminating orphan node %s (%s)", handle.node_id, kind)
                    try:
                        provider.terminate(handle)
                    except Exception:  # the next sweep tries again; the other orphans go now
                        log.exception("terminating orphan node %s failed", handle.node_id)
            with self.sessions() as session:
                stuck = session.execute(
                    select(Node.id, Node.provider, Node.provider_ref).where(
                        Node.provider == kind, Node.state == NodeState.TERMINATING.value
                    )
                ).all()
            for node_id, provider_kind, ref in stuck:
                self._terminate(node_id, provider_kind, ref)
            self._adopt_or_fail(handles, now)

    def _adopt_or_fail(self, handles: list[NodeHandle], now: float) -> None:
        """A node recorded as requested whose launch never got recorded (a crash in between): adopt
        the machine if the provider made it; else it never existed, so it simply ends (a failed
        node would sit in list-nodes as unusable for the post-mortem time, for no machine at all)."""
        by_id = {h.node_id: h for h in handles}
        with self.sessions.begin() as session:
            pending = session.scalars(
                select(Node).where(Node.state == NodeState.REQUESTED.value, Node.created_at < now - 10.0)
            )
            for node in pending:
                handle = by_id.get(node.id)
                if handle is not None:
                    node.provider_ref = dict(handle.provider_ref)
                    node_service.advance(node, NodeEvent.ALLOCATE)
                    node_service.advance(node, NodeEvent.BOOT)
                else:
                    node.error = {"code": "LaunchInterrupted", "message": "the control plane stopped first"}
                    node_service.advance(node, NodeEvent.TERMINATE, now)
                    node_service.advance(node, NodeEvent.TERMINATED, now)


RECONCILE_FAILED = "ReconcileFailed"


def reconcile_error(exc: Exception) -> dict[str, str]:
    detail = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    message = f"the autoscaler could not reconcile this cluster: {type(exc).__name__}"
    return {"code": RECONCILE_FAILED, "message": f"{message}: {detail}" if detail else message}


def without_reconcile_error(errors: list[Any] | None) -> list[Any]:
    return [e for e in errors or [] if not (isinstance(e, dict) and e.get("code") == RECONCILE_FAILED)]


def _demands(session: Session) -> dict[tuple[int, str], autoscale.Demand]:
    """Nodes every cluster's jobs need (running jobs' nodes + queued jobs' instance counts), read
    once per pass in one aggregate query, however many clusters and jobs. Placement within the pass
    moves jobs from queued to running without changing their sum."""
    # Sums of CASEs, grouped by plain columns: grouping by the expression ``status = :queued``
    # works on SQLite but not on PostgreSQL, whose select list and GROUP BY get separate bind
    # parameters and so are not the same expression (GroupingError: every pass failed there).
    queued = Job.status == job_status.QUEUED
    rows = session.execute(
        select(
            Job.workspace_id,
            Job.compute_name,
            func.coalesce(func.sum(case((queued, Job.instance_count), else_=0)), 0),
            func.coalesce(func.sum(case((queued, 0), else_=Job.instance_count)), 0),
        )
        .where(Job.status.in_(job_status.ACTIVE_VALUES), Job.compute_name.is_not(None))
        .group_by(Job.workspace_id, Job.compute_name)
    ).all()
    return {
        (workspace_id, str(name)): autoscale.Demand(
            running_nodes=int(running), queued=(int(waiting),) if waiting else ()
        )
        for workspace_id, name, waiting, running in rows
    }


def _workspace(session: Session, workspace_id: int) -> Workspace:
    ws = session.get(Workspace, workspace_id)
    assert ws is not None
    return ws


def _capacity(session: Session, location: str, vcpus: int) -> tuple[int, str]:
    row = session.get(Location, location)
    capacity = row.capacity if row else {}
    total = float(capacity.get("vcpus", 0)) * float(capacity.get("overcommit", 1.0))
    used = sum(
        session.scalars(
            select(Node.vcpus).where(Node.location == location, Node.state.in_([s.value for s in HOLDING]))
        )
    )
    free = int((total - used) // vcpus) if vcpus else 0
    return max(0, free), f"location {location} capacity {used:g}/{total:g} vCPUs in use"
