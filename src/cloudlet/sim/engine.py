"""The simulator's event loop and reconcile pass.

Each step jumps the simulated clock to the next event, records what the world did at that instant
(agents registered, jobs ended, low-priority nodes evicted, jobs arrived), then runs a reconcile
pass for each cluster touched — the same four stages as ``control.clusters.ClusterReconciler``:

1. record — done by the event handlers (the real pass learns the same facts from the store);
2. schedule — ``domain.jobs.scheduling.schedule`` over the first ``SCHEDULE_WINDOW`` queued jobs and the
   idle nodes, oldest first, as ``services.jobs.dispatch.schedule_compute`` does;
3. decide — ``domain.compute.autoscale.decide`` with the aggregate demand, quota headroom and node views;
4. act — new nodes are recorded ``requested`` and the provider is asked for them; nodes to release
   drain and terminate (failed ones keep their state and only lose their machine).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable

from cloudlet.domain.compute import autoscale, eviction
from cloudlet.domain.compute.nodes import FAILED, NodeEvent, NodeState
from cloudlet.domain.compute.quota import CoreHolder, QuotaLimits, Tier
from cloudlet.domain.jobs.scheduling import schedule
from cloudlet.providers.base import NodeHandle, NodeRequest, ProviderError
from cloudlet.sim.clock import EventKind, EventQueue, SimClock
from cloudlet.sim.provider import SimulatedProvider
from cloudlet.sim.quota import UNLIMITED, headroom_nodes
from cloudlet.sim.records import (
    SCHEDULE_WINDOW,
    ClusterSpec,
    ClusterState,
    JobSpec,
    SimJob,
    SimNode,
)

__all__ = ["ClusterSpec", "JobSpec", "Simulator"]

SeriesPoint = tuple[float, int, int, int]  # time, machines held, jobs queued, nodes running jobs


class Simulator:
    def __init__(
        self,
        clusters: Iterable[ClusterSpec],
        *,
        boot_delay_s: float = 60.0,
        quota: QuotaLimits | None = None,
        seed: int = 0,
        pass_all: bool = False,
        record_series: bool = False,
        installation_id: str = "sim",
    ) -> None:
        self.clock = SimClock()
        self.events = EventQueue()
        self.provider = SimulatedProvider(self.clock, boot_delay_s, self._on_booted)
        self.clusters: dict[str, ClusterState] = {}
        for spec in clusters:
            if spec.name in self.clusters:
                raise ValueError(f"cluster {spec.name} is given twice")
            self.clusters[spec.name] = ClusterState(spec)
            self.events.push(0.0, EventKind.IDLE_DUE, spec.name)  # the first pass (min_instances)
        self.quota = quota
        self.rng = random.Random(seed)
        self.pass_all = pass_all  # every cluster every step, as the real loop does (the benchmark)
        self.installation_id = installation_id
        self.jobs: dict[str, SimJob] = {}
        self.series: dict[str, list[SeriesPoint]] | None = (
            {name: [] for name in self.clusters} if record_series else None
        )
        self.passes = 0
        self.decisions = 0
        self.placements = 0
        self._where: dict[str, ClusterState] = {}  # node id -> its cluster, while it has a machine
        self._node_seq = 0
        self._dirty: dict[str, ClusterState] = {}
        self._short: set[str] = set()  # clusters that could not make all the nodes they want

    # -- driving ---------------------------------------------------------------------------------
    def submit(self, jobs: Iterable[JobSpec]) -> None:
        for spec in jobs:
            if spec.cluster not in self.clusters:
                raise ValueError(f"job {spec.name}: unknown cluster {spec.cluster}")
            if spec.nodes < 1 or spec.duration_s < 0:
                raise ValueError(f"job {spec.name}: needs nodes >= 1 and a duration >= 0")
            self.events.push(spec.submit_at, EventKind.ARRIVED, spec)

    def run(self, until: float | None = None) -> None:
        """Replay until nothing is left to happen (or the next event is after ``until``)."""
        while True:
            when = self.events.next_time()
            if when is None or (until is not None and when > until):
                return
            self.step()

    def step(self) -> float:
        """Jump to the next event, record everything due then, run the passes; returns the time."""
        when = self.record_next()
        self.reconcile_due()
        return when

    def record_next(self) -> float:
        """Jump the clock to the next event and record everything due then (stage 1)."""
        when = self.events.next_time()
        if when is None:
            raise RuntimeError("nothing left to simulate")
        self.clock.advance_to(when)
        for kind, payload in self.events.pop_due(when):
            self._record(kind, payload)
        return when

    def reconcile_due(self) -> None:
        """Stages 2-4 for every cluster something happened to (or every cluster: ``pass_all``)."""
        todo = self.clusters if self.pass_all else self._dirty
        for cluster in list(todo.values()):
            self.reconcile(cluster)
        self._dirty = {}

    # -- 1. record -------------------------------------------------------------------------------
    def _record(self, kind: EventKind, payload: object) -> None:
        if kind is EventKind.ARRIVED:
            assert isinstance(payload, JobSpec)
            self._arrived(payload)
        elif kind is EventKind.BOOTED:
            self._booted(str(payload))
        elif kind is EventKind.JOB_ENDED:
            assert isinstance(payload, tuple)
            self._job_ended(*payload)
        elif kind is EventKind.EVICTED:
            self._evicted(str(payload))
        else:
            self._idle_due(payload)

    def _idle_due(self, payload: object) -> None:
        """A pass is due for a cluster; for an idle deadline, only if that node is still idle since
        then (the real loop sleeps until the next deadline of a node idle now)."""
        if isinstance(payload, tuple):
            name, node, since = payload
            if node.state is not NodeState.IDLE or node.idle_since != since:
                return
        else:
            name = payload
        cluster = self.clusters[str(name)]
        self._dirty[cluster.name] = cluster

    def _arrived(self, spec: JobSpec) -> None:
        if spec.name in self.jobs:
            raise ValueError(f"job {spec.name} is submitted twice")
        job = SimJob(spec, queued_since=self.clock.now)
        self.jobs[spec.name] = job
        cluster = self.clusters[spec.cluster]
        cluster.enqueue(job)
        self._dirty[cluster.name] = cluster

    def _on_booted(self, handle: NodeHandle, when: float) -> None:
        self.events.push(when, EventKind.BOOTED, handle.node_id)

    def _booted(self, node_id: str) -> None:
        cluster = self._where.get(node_id)
        node = cluster.nodes.get(node_id) if cluster else None
        if cluster is None or node is None or node.state is not NodeState.STARTING:
            return  # released or evicted while it booted
        node.advance(NodeEvent.REGISTER, self.clock.now)
        node.registered_at = self.clock.now
        cluster.totals.boot_node_s += self.clock.now - node.created_at
        self._now_idle(cluster, node)

    def _job_ended(self, job: SimJob, attempt: int) -> None:
        if job.attempt != attempt or job.ended_at is not None or job.started_at is None:
            return  # that run was evicted; the job was requeued
        now = self.clock.now
        cluster = self.clusters[job.spec.cluster]
        job.ended_at = now
        cluster.totals.busy_node_s += (now - job.started_at) * job.spec.nodes
        cluster.totals.jobs_completed += 1
        cluster.totals.waits.append(job.wait_s)
        cluster.running_nodes -= job.spec.nodes
        self._free_nodes(cluster, job)

    def _evicted(self, node_id: str) -> None:
        cluster = self._where.get(node_id)
        node = cluster.nodes.get(node_id) if cluster else None
        if cluster is None or node is None:
            return
        # Its machine taken back (a low-priority node: only those get EVICTED events), by the
        # server's own rule (domain/compute/eviction).
        if eviction.refusal(eviction.Candidate(node.id, node.state, True), eviction.Cause.ENGINE):
            return
        job = node.job
        node.advance(NodeEvent.PREEMPT, self.clock.now)
        cluster.failed += 1
        cluster.mark_not_idle(node)
        cluster.totals.preemptions += 1
        self._dirty[cluster.name] = cluster
        if job is not None:
            self._requeue(cluster, job)

    def _requeue(self, cluster: ClusterState, job: SimJob) -> None:
        """The run is lost (its node was taken back); the job queues again from the start."""
        now = self.clock.now
        assert job.started_at is not None
        cluster.totals.lost_node_s += (now - job.started_at) * job.spec.nodes
        cluster.running_nodes -= job.spec.nodes
        self._free_nodes(cluster, job)
        job.attempt += 1
        job.started_at = None
        limit = cluster.spec.give_up_after_evictions
        if limit and job.attempt >= limit:
            job.ended_at = now
            cluster.totals.jobs_given_up += 1
            return
        job.queued_since = now
        cluster.enqueue(job)

    def _free_nodes(self, cluster: ClusterState, job: SimJob) -> None:
        for node in job.nodes:
            if node.state is NodeState.BUSY:
                node.advance(NodeEvent.RELEASE, self.clock.now)
                self._now_idle(cluster, node)
        job.nodes = ()
        self._dirty[cluster.name] = cluster

    def _now_idle(self, cluster: ClusterState, node: SimNode) -> None:
        cluster.mark_idle(node)
        self._dirty[cluster.name] = cluster
        assert node.idle_since is not None
        limit = cluster.spec.idle_s
        due = node.idle_since + limit
        while due - node.idle_since < limit:  # float rounding: never wake a hair too early
            due = math.nextafter(due, math.inf)
        self.events.push(due, EventKind.IDLE_DUE, (cluster.name, node, node.idle_since))

    # -- the pass: 2. schedule, 3. decide, 4. act -----------------------------------------------
    def reconcile(self, cluster: ClusterState) -> autoscale.Decision:
        self.passes += 1
        self._schedule(cluster)
        decision = self._decide(cluster)
        self._act(cluster, decision)
        if self.series is not None:
            self._note_series(cluster)
        return decision

    def _schedule(self, cluster: ClusterState) -> None:
        if not cluster.idle or not cluster.queue:
            return
        window = cluster.queue[:SCHEDULE_WINDOW]
        placements = schedule([job.view for job in window], cluster.idle_ids())
        now = self.clock.now
        for placement in placements:
            job = cluster.queued[placement.job]
            nodes = tuple(cluster.idle[node_id] for node_id in placement.nodes)
            for node in nodes:
                node.advance(NodeEvent.ASSIGN, now)
                node.job = job
                cluster.mark_not_idle(node)
            job.nodes = nodes
            job.started_at = now
            if job.first_started_at is None:
                job.first_started_at = now
            job.wait_s += now - job.queued_since
            cluster.queued_nodes -= job.spec.nodes
            cluster.running_nodes += job.spec.nodes
            self.events.push(now + job.spec.duration_s, EventKind.JOB_ENDED, (job, job.attempt))
        cluster.take_placed(len(window), {p.job for p in placements})
        cluster.totals.placements += len(placements)
        self.placements += len(placements)
        if placements and len(window) == SCHEDULE_WINDOW and cluster.idle and cluster.queue:
            # One round looks at SCHEDULE_WINDOW jobs; the real loop's next pass (within a
            # second) takes the next ones: here, at the same instant.
            self.events.push(now, EventKind.IDLE_DUE, cluster.name)

    def _decide(self, cluster: ClusterState) -> autoscale.Decision:
        demand = cluster.demand()
        views = list(cluster.views.values())
        wanted = autoscale.cluster_target(cluster.view, demand)
        # As the real pass: quota only matters when the cluster must grow.
        grow = wanted > cluster.serving()
        limits = self._limits(cluster) if grow else autoscale.Limits(UNLIMITED)
        self.decisions += 1
        return autoscale.decide(cluster.view, views, demand, limits, self.clock.now)

    def _limits(self, cluster: ClusterState) -> autoscale.Limits:
        if self.quota is None:
            return autoscale.Limits(UNLIMITED)
        size = cluster.spec.size
        holders = [
            CoreHolder(c.name, "sim", c.spec.size.family, c.spec.tier, c.held_cores(), "")
            for c in self.clusters.values()
        ]
        nodes, reason = headroom_nodes(
            self.quota, holders, cluster.name, size.family, cluster.spec.tier, size.vcpus, cluster.holding
        )
        return autoscale.Limits(nodes, reason)

    def _act(self, cluster: ClusterState, decision: autoscale.Decision) -> None:
        for _ in range(decision.launch):
            self._launch(cluster)
        for node_id in decision.terminate:
            self._release(cluster, cluster.nodes[node_id])
        if decision.target > cluster.serving():
            self._short.add(cluster.name)
        else:
            self._short.discard(cluster.name)

    def _launch(self, cluster: ClusterState) -> None:
        now, spec = self.clock.now, cluster.spec
        self._node_seq += 1
        node = SimNode(f"n-{self._node_seq:09d}", created_at=now, views=cluster.views)
        cluster.nodes[node.id] = node
        cluster.holding += 1
        cluster.totals.launches += 1
        self._where[node.id] = cluster
        request = NodeRequest(
            node_id=node.id,
            token="simulated",
            installation_id=self.installation_id,
            server_url="simulated://",
            size=spec.size.name,
            vcpus=spec.size.vcpus,
            memory_gb=spec.size.memory_gb,
            gpus=spec.size.gpus,
            tier=spec.tier.value,
        )
        try:
            self.provider.create(request)
        except ProviderError:
            node.advance(NodeEvent.ALLOCATION_FAIL, now)
            cluster.failed += 1
            return
        node.advance(NodeEvent.ALLOCATE, now)
        node.advance(NodeEvent.BOOT, now)
        if spec.tier is Tier.LOW_PRIORITY and spec.preemptions_per_node_hour > 0:
            after = self.rng.expovariate(spec.preemptions_per_node_hour / 3600.0)
            self.events.push(now + after, EventKind.EVICTED, node.id)

    def _release(self, cluster: ClusterState, node: SimNode) -> None:
        """``control.actions.release`` then the provider's terminate, at the same instant."""
        now = self.clock.now
        if node.state in FAILED:
            if node.ended_at is not None:
                return
            node.ended_at = now
            cluster.failed -= 1
        else:
            if node.state is NodeState.IDLE:
                node.advance(NodeEvent.DRAIN, now)
            node.advance(NodeEvent.TERMINATE, now)
        self.provider.terminate(NodeHandle(node.id))
        if node.state is NodeState.TERMINATING:
            node.advance(NodeEvent.TERMINATED, now)
        cluster.totals.node_s += now - node.created_at
        cluster.totals.releases += 1
        cluster.holding -= 1
        cluster.mark_not_idle(node)
        del cluster.nodes[node.id]
        del cluster.views[node.id]
        # Freed quota: the real loop passes every cluster each second; here the clusters held
        # back get a pass at once.
        for name in self._short - {cluster.name}:
            self.events.push(now, EventKind.IDLE_DUE, name)
        del self._where[node.id]

    def _note_series(self, cluster: ClusterState) -> None:
        assert self.series is not None
        points = self.series[cluster.name]
        point = (self.clock.now, cluster.holding, len(cluster.queue), cluster.running_nodes)
        if points and points[-1][1:] == point[1:]:
            return
        if points and points[-1][0] == point[0]:
            points[-1] = point
        else:
            points.append(point)

    # -- reading the outcome ---------------------------------------------------------------------
    def node_seconds(self, cluster: str) -> float:
        """Machine time so far, counting the machines still held up to now."""
        state = self.clusters[cluster]
        held = sum(self.clock.now - n.created_at for n in state.nodes.values() if n.ended_at is None)
        return state.totals.node_s + held
