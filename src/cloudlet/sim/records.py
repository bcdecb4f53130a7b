"""In-memory records the simulator keeps instead of store rows: clusters, nodes and jobs."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from cloudlet.domain.compute.autoscale import ClusterView, Demand, NodeView
from cloudlet.domain.compute.nodes import FINAL, NodeEvent, NodeState, next_node_state
from cloudlet.domain.compute.quota import Tier
from cloudlet.domain.compute.sizes import VmSize
from cloudlet.domain.jobs.scheduling import QueuedJob

# services.jobs.dispatch.SCHEDULE_WINDOW: the queued jobs one scheduling round looks at, in priority
# order (a unit test keeps the two equal; importing it here would pull the store into the simulator).
SCHEDULE_WINDOW = 256


@dataclass(frozen=True)
class ClusterSpec:
    """An AmlCompute cluster's settings, as ``compute create`` takes them."""

    name: str
    size: VmSize
    min_nodes: int = 0
    max_nodes: int = 1
    idle_s: float = 120.0
    tier: Tier = Tier.DEDICATED
    # Low-priority evictions: mean preemptions per node-hour (exponential, seeded).
    preemptions_per_node_hour: float = 0.0
    # A job evicted this many times is given up (0: requeued forever, as cloudlet does). Without a
    # limit, a job much longer than the mean time between evictions would never finish.
    give_up_after_evictions: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.min_nodes <= self.max_nodes:
            raise ValueError(
                f"cluster {self.name}: need 0 <= min ({self.min_nodes}) <= max ({self.max_nodes})"
            )
        if self.idle_s < 0:
            raise ValueError(f"cluster {self.name}: idle time cannot be negative")


@dataclass(frozen=True)
class JobSpec:
    """A command job to submit: when, to which cluster, how long it runs, on how many nodes."""

    name: str
    cluster: str
    submit_at: float
    duration_s: float
    nodes: int = 1
    priority: int = 2  # Azure's queue_settings.priority medium


@dataclass(eq=False)
class SimNode:
    id: str
    created_at: float
    views: dict[str, NodeView] = field(repr=False)  # the cluster's views, kept current by advance()
    state: NodeState = NodeState.REQUESTED
    idle_since: float | None = None
    registered_at: float | None = None
    ended_at: float | None = None
    job: SimJob | None = None
    view: NodeView = field(init=False)

    def __post_init__(self) -> None:
        self.view = NodeView(self.id, self.state, self.idle_since)
        self.views[self.id] = self.view

    def advance(self, event: NodeEvent, now: float) -> None:
        """``domain.compute.nodes`` transitions, with the bookkeeping ``services.compute.nodes.advance``
        does."""
        self.state = next_node_state(self.state, event, self.id)
        if self.state is NodeState.IDLE:
            self.idle_since = now
            self.job = None
        elif self.state is NodeState.BUSY:
            self.idle_since = None
        elif self.state in FINAL:
            self.ended_at = now
        self.view = NodeView(self.id, self.state, self.idle_since)
        if self.id in self.views:
            self.views[self.id] = self.view


@dataclass(eq=False)
class SimJob:
    spec: JobSpec
    queued_since: float
    attempt: int = 0
    started_at: float | None = None
    first_started_at: float | None = None
    ended_at: float | None = None
    wait_s: float = 0.0  # time queued, over every attempt
    nodes: tuple[SimNode, ...] = ()
    view: QueuedJob = field(init=False)

    def __post_init__(self) -> None:
        s = self.spec
        self.view = QueuedJob(s.name, s.nodes, s.priority, s.submit_at)

    @property
    def order(self) -> tuple[int, float, str]:
        """``domain.jobs.scheduling.queue_order``'s key: priority, then FIFO, then name."""
        return (-self.spec.priority, self.spec.submit_at, self.spec.name)


@dataclass
class ClusterTotals:
    node_s: float = 0.0  # machine time, creation to release
    busy_node_s: float = 0.0  # node time running jobs that completed
    boot_node_s: float = 0.0  # node time from creation to the agent's registration
    lost_node_s: float = 0.0  # node time of runs cut short by evictions (redone later)
    jobs_given_up: int = 0
    launches: int = 0
    releases: int = 0
    placements: int = 0
    preemptions: int = 0
    jobs_completed: int = 0
    waits: list[float] = field(default_factory=list)


class ClusterState:
    """One cluster's live nodes, queue and demand counters (what the store would hold)."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.view = ClusterView(spec.name, spec.min_nodes, spec.max_nodes, spec.idle_s)
        self.nodes: dict[str, SimNode] = {}  # live and not-yet-released failed nodes, by creation
        self.views: dict[str, NodeView] = {}  # their autoscaler views, in the same order
        self.idle: dict[str, SimNode] = {}
        self.queue: list[SimJob] = []  # kept in queue order
        self.queued: dict[str, SimJob] = {}  # the same jobs by name
        self.failed = 0  # failed nodes whose machine is not released yet (not serving)
        self.queued_nodes = 0
        self.running_nodes = 0
        self.holding = 0  # machines that exist (domain.compute.nodes.HOLDING)
        self.totals = ClusterTotals()

    @property
    def name(self) -> str:
        return self.spec.name

    def demand(self) -> Demand:
        """As ``control.clusters._demands``: running jobs' nodes plus one aggregate for the queue."""
        queued = (self.queued_nodes,) if self.queued_nodes else ()
        return Demand(running_nodes=self.running_nodes, queued=queued)

    def enqueue(self, job: SimJob) -> None:
        if not self.queue or self.queue[-1].order <= job.order:
            self.queue.append(job)  # arrivals come in time order: the common case
        else:
            bisect.insort(self.queue, job, key=lambda j: j.order)
        self.queued[job.spec.name] = job
        self.queued_nodes += job.spec.nodes

    def take_placed(self, window: int, placed: set[str]) -> None:
        """Drop the placed jobs (all inside the scheduling window) from the queue."""
        head = self.queue[:window]
        self.queue[:window] = [j for j in head if j.spec.name not in placed]
        for name in placed:
            del self.queued[name]

    def mark_idle(self, node: SimNode) -> None:
        self.idle[node.id] = node

    def mark_not_idle(self, node: SimNode) -> None:
        self.idle.pop(node.id, None)

    def idle_ids(self) -> list[str]:
        """Idle nodes oldest first (ids sort by creation), as ``schedule_compute`` orders them."""
        return sorted(self.idle)

    def serving(self) -> int:
        """Nodes usable by jobs without a new request (released ones are gone from ``nodes``)."""
        return len(self.nodes) - self.failed

    def held_cores(self) -> int:
        """``services.compute.quotas.cluster_nodes_held`` × vCPUs: machines, and at least min_instances."""
        return max(self.holding, self.spec.min_nodes) * self.spec.size.vcpus
