"""Why a job waits, as one code and one sentence (pure): the studio's "why is my job not running".

``services.jobs.job_wait`` gathers the facts (the job's place in its compute's queue in the scheduler's
order, the compute's nodes, and the same lock and quota limits the autoscaler reads); this picks
the one reason that binds first: the job's own state, then what stops the compute from growing
(a lock, launches that keep failing, max_instances, quota, the location's capacity), then nodes
on their way, then the jobs ahead of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class WaitCode(StrEnum):
    CANCELING = "canceling"
    PREPARING = "preparing"
    LOCKED = "locked"
    QUOTA = "quota"
    CLUSTER_AT_MAX = "cluster_at_max"
    WAITING_FOR_NODES = "waiting_for_nodes"
    INSTANCE_STOPPED = "instance_stopped"
    NO_FREE_VCPU = "no_free_vcpu"
    BEHIND_HIGHER_PRIORITY = "behind_higher_priority"
    NEXT = "next"  # first in line with room for it: the next scheduling round places it
    # The location or its provider cannot give the nodes the cluster may add (its capacity is used
    # up, or launches fail): not the cluster's max, not nodes on their way.
    NO_CAPACITY = "no_capacity"
    # Issue 31 (domain.jobs.wait_estimate): fair share, spot tier, dependencies.
    FAIR_SHARE = "fair_share"  # teams that used less of their share lately go first
    SPOT = "spot"  # spot tier: only capacity no other job wants
    DEPENDENCY = "dependency"  # waits for other jobs (a pipeline's upstream steps)


@dataclass(frozen=True)
class QueuePlace:
    """Where the job stands in its compute's queue: 1-based position (None when it is deeper than
    the part of the queue read), the jobs ahead, the cores they need, and how many of them have a
    higher priority."""

    position: int | None
    ahead: int
    ahead_cores: int
    ahead_higher_priority: int
    ahead_nodes: int = 0  # the nodes the jobs ahead take (a cluster's queue)


@dataclass(frozen=True)
class ClusterFacts:
    max_instances: int
    serving_nodes: int  # requested, allocated, starting, idle or busy
    starting_nodes: int  # requested, allocated or starting
    idle_nodes: int
    job_nodes: int  # the job's instance_count
    lock_reason: str | None  # the lock that freezes scaling, in the autoscaler's words
    quota_nodes: int  # how many more nodes the quota allows now
    quota_reason: str  # the quota that binds, in the autoscaler's words ("" when none does)
    # The autoscaler's record that the location's capacity binds ("" when it does not), and how
    # many more nodes the location gives.
    capacity_reason: str = ""
    capacity_nodes: int = 0
    # Launches of the cluster's nodes that failed lately (since one last came up), over how many
    # seconds, and what the provider said last.
    failed_launches: int = 0
    failed_over_s: float = 0.0
    launch_error: str = ""


@dataclass(frozen=True)
class InstanceFacts:
    state: str  # the instance's state (Running, Stopped, …)
    vcpus: int
    free_vcpus: int
    job_vcpus: int


@dataclass(frozen=True)
class WaitReason:
    code: WaitCode
    message: str


def cluster_reason(place: QueuePlace, facts: ClusterFacts) -> WaitReason:
    """Why a queued job on a compute cluster has not started. Busy nodes count for nothing: the
    job needs its own nodes and those of the queued jobs ahead, from idle, starting or new ones."""
    if facts.lock_reason:
        return WaitReason(WaitCode.LOCKED, f"the cluster cannot add nodes: {facts.lock_reason}")
    needed = facts.job_nodes + place.ahead_nodes
    if facts.failed_launches and needed > facts.idle_nodes:
        # Before "nodes starting": each retry is a node requested again, soon failed again.
        return WaitReason(
            WaitCode.NO_CAPACITY,
            f"the provider cannot give nodes: {_launches(facts.failed_launches)} failed in the last "
            f"{_duration(facts.failed_over_s)} ({facts.launch_error or 'no message'})",
        )
    missing = needed - facts.idle_nodes - facts.starting_nodes
    can_grow = facts.max_instances - facts.serving_nodes
    starting = WaitReason(
        WaitCode.WAITING_FOR_NODES,
        f"{_nodes(facts.starting_nodes)} starting; the cluster has {_nodes(facts.serving_nodes)} "
        f"of at most {facts.max_instances}",
    )
    if missing <= 0:
        return starting if facts.idle_nodes < needed else _queue_reason(place)
    if can_grow <= 0:
        if facts.starting_nodes:
            return starting
        ahead = (
            f"; {_jobs(place.ahead)} ahead of it {'needs' if place.ahead == 1 else 'need'} "
            f"{place.ahead_cores} cores"
            if place.ahead
            else ""
        )
        return WaitReason(
            WaitCode.CLUSTER_AT_MAX,
            f"the cluster is at its maximum of {_nodes(facts.max_instances)}, all busy{ahead}",
        )
    if facts.quota_reason and facts.quota_nodes < min(missing, can_grow):
        return WaitReason(WaitCode.QUOTA, f"the cluster cannot add nodes: {facts.quota_reason}")
    if facts.capacity_reason and facts.capacity_nodes < min(missing, can_grow):
        return WaitReason(WaitCode.NO_CAPACITY, f"the location cannot give nodes: {facts.capacity_reason}")
    return WaitReason(
        WaitCode.WAITING_FOR_NODES,
        f"scaling up: {_nodes(min(missing, can_grow))} more wanted; the cluster has "
        f"{_nodes(facts.serving_nodes)} of at most {facts.max_instances}",
    )


def instance_reason(place: QueuePlace, facts: InstanceFacts) -> WaitReason:
    """Why a queued job on a compute instance (or an attached VM) has not started."""
    state = facts.state.lower()
    if state in ("starting", "creating", "restarting", "unknown"):
        return WaitReason(WaitCode.WAITING_FOR_NODES, f"the instance is {state}: jobs start once it runs")
    if state != "running":
        return WaitReason(WaitCode.INSTANCE_STOPPED, f"the instance is {state}: start it to run its jobs")
    if facts.free_vcpus < facts.job_vcpus:
        return WaitReason(
            WaitCode.NO_FREE_VCPU,
            f"the job needs {facts.job_vcpus} vCPUs and {facts.free_vcpus} of {facts.vcpus} are free",
        )
    return _queue_reason(place)


def _queue_reason(place: QueuePlace) -> WaitReason:
    if place.ahead_higher_priority:
        return WaitReason(
            WaitCode.BEHIND_HIGHER_PRIORITY,
            f"{_jobs(place.ahead_higher_priority)} of higher priority go first",
        )
    if place.ahead:
        return WaitReason(WaitCode.NEXT, f"{_jobs(place.ahead)} ahead go first ({place.ahead_cores} cores)")
    return WaitReason(WaitCode.NEXT, "first in line: the next scheduling round places it")


def _nodes(count: int) -> str:
    return f"{count} node{'' if count == 1 else 's'}"


def _launches(count: int) -> str:
    return f"{count} node launch{'' if count == 1 else 'es'}"


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{max(1, round(seconds))} s" if minutes < 2 else f"{minutes} min"


def _jobs(count: int) -> str:
    return f"{count} job{'' if count == 1 else 's'}"
