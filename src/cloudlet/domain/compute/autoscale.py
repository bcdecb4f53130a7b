"""The cluster autoscaler as one pure decision (C7–C10), in the spirit of Ray autoscaler v2.

``decide(cluster, nodes, demand, limits, now)`` looks at plain data and returns what to do and
why, in words a user can act on. The control loop records what the world did, calls this, then
carries the decision out.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from operator import attrgetter

from cloudlet.domain.compute.lifecycle import cluster_target_nodes
from cloudlet.domain.compute.nodes import FAILED, SERVING, NodeState


@dataclass(frozen=True)
class ClusterView:
    name: str
    min_instances: int
    max_instances: int
    idle_time_before_scale_down_s: float


@dataclass(frozen=True)
class NodeView:
    id: str
    state: NodeState
    idle_since: float | None = None  # monotonic-free wall time (epoch seconds) the node became idle


@dataclass(frozen=True)
class Demand:
    """Nodes the cluster's jobs need at once: running jobs' nodes plus queued jobs' instance counts."""

    running_nodes: int = 0
    queued: tuple[int, ...] = ()

    @property
    def nodes(self) -> int:
        return self.running_nodes + sum(self.queued)


# The code of a cluster's warning while its location's capacity holds its scale-up (recorded by
# ``control.scaling``, read by a queued job's reason).
NO_CAPACITY = "NoCapacity"


@dataclass(frozen=True)
class Limits:
    """How many more nodes may be made now, and why not (quota, capacity, a lock)."""

    quota_nodes: int
    quota_reason: str = ""
    capacity_nodes: int = 1 << 30
    capacity_reason: str = ""
    blocked_reason: str | None = None


@dataclass(frozen=True)
class Decision:
    target: int
    launch: int = 0
    terminate: tuple[str, ...] = ()
    reasons: tuple[str, ...] = field(default_factory=tuple)

    @property
    def explanation(self) -> str:
        return "; ".join(self.reasons)


def cluster_target(cluster: ClusterView, demand: Demand) -> int:
    return cluster_target_nodes(cluster.min_instances, cluster.max_instances, demand.nodes)


def decide(
    cluster: ClusterView, nodes: list[NodeView], demand: Demand, limits: Limits, now: float
) -> Decision:
    target = cluster_target(cluster, demand)
    # One C-level count of the states instead of a Python loop per question: a pass over a
    # cluster of thousands of nodes (the scale simulator) stays cheap when nothing changes.
    counts = Counter(map(_STATE, nodes))
    live_count = sum(counts[s] for s in SERVING)
    broken: tuple[str, ...] = ()
    if any(counts[s] for s in _RELEASE_NOW):
        broken = tuple(n.id for n in nodes if n.state in _RELEASE_NOW)
    if limits.blocked_reason:
        return Decision(target, terminate=broken, reasons=(limits.blocked_reason,))
    if live_count < target:
        return _scale_up(target, live_count, limits, broken)
    if live_count > target:
        live = list(nodes) if live_count == len(nodes) else [n for n in nodes if n.state in SERVING]
        return _scale_down(cluster, target, live, now, broken)
    starting = live_count - counts[NodeState.IDLE] - counts[NodeState.BUSY]
    words = f"{live_count} nodes, {starting} starting" if starting else f"steady at {live_count} nodes"
    return Decision(target, terminate=broken, reasons=(words,))


_RELEASE_NOW = FAILED  # their machines are released at once; the records stay
_STATE = attrgetter("state")
_IDLE = NodeState.IDLE  # a module constant: looking a member up on the enum class is slow


def _scale_up(target: int, live: int, limits: Limits, broken: tuple[str, ...]) -> Decision:
    wanted = target - live
    launch = max(0, min(wanted, limits.quota_nodes, limits.capacity_nodes))
    reasons = [f"scaling up from {live} to {target} nodes"]
    if launch < wanted:
        if limits.quota_nodes < wanted:
            reasons.append(f"scale-up blocked: {limits.quota_reason}")
        if limits.capacity_nodes < wanted:
            reasons.append(f"scale-up blocked: {limits.capacity_reason}")
    return Decision(target, launch=launch, terminate=broken, reasons=tuple(reasons))


def _scale_down(
    cluster: ClusterView, target: int, live: list[NodeView], now: float, broken: tuple[str, ...]
) -> Decision:
    idle = sorted(
        [n for n in live if n.state is _IDLE and n.idle_since is not None],
        key=lambda n: n.idle_since or 0.0,
    )
    limit = cluster.idle_time_before_scale_down_s
    expired = [n for n in idle if now - (n.idle_since or now) >= limit]
    surplus = len(live) - target
    chosen = tuple(n.id for n in expired[:surplus])
    if chosen:
        reasons = (
            f"scaling down from {len(live)} to {len(live) - len(chosen)} nodes: "
            f"{len(chosen)} idle for {limit:g} s or more",
        )
    elif idle:
        longest = max(0.0, now - (idle[0].idle_since or now))
        reasons = (f"{len(idle)} node{'s' if len(idle) > 1 else ''} idle {longest:.0f} s of {limit:g} s",)
    else:
        reasons = (f"{len(live)} nodes busy; {target} needed once their jobs end",)
    return Decision(target, terminate=chosen + broken, reasons=reasons)
