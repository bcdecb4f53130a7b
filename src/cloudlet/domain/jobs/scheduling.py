"""Per-compute job queue (pure): priority, then FIFO; multi-node jobs all-or-nothing; smaller jobs
backfill free nodes that the head of the queue cannot use yet. Cluster nodes run one job at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter


@dataclass(frozen=True)
class QueuedJob:
    name: str
    instance_count: int
    priority: int  # higher runs first (Azure: queue_settings.priority low=1, medium=2, high=3)
    submitted_at: float
    spot: bool = False  # queue_settings.job_tier spot: after every other job


@dataclass(frozen=True)
class Placement:
    job: str
    nodes: tuple[str, ...]


def queue_order(jobs: list[QueuedJob]) -> list[QueuedJob]:
    """Spot tier last, then priority (high first), then submission time, then name. Stable sorts
    on C-level keys: the same order as one sort on ``(spot, -priority, submitted_at, name)``, a few
    times faster."""
    fifo = sorted(jobs, key=_FIFO)
    ordered = sorted(fifo, key=_PRIORITY, reverse=True)  # reverse=True keeps equal keys in order
    return sorted(ordered, key=_SPOT) if any(map(_SPOT, ordered)) else ordered


_FIFO = attrgetter("submitted_at", "name")
_PRIORITY = attrgetter("priority")
_SPOT = attrgetter("spot")


def schedule(jobs: list[QueuedJob], free_nodes: list[str]) -> list[Placement]:
    """Place as many queued jobs as fit on ``free_nodes`` (ids in a stable order)."""
    return schedule_in_order(queue_order(jobs), free_nodes)


def schedule_in_order(ordered: list[QueuedJob], free_nodes: list[str]) -> list[Placement]:
    """Place jobs in the order given (a fair-share order, already admitted) on ``free_nodes``:
    all-or-nothing per job, smaller ones backfilling nodes the ones before cannot use."""
    free = list(free_nodes)
    placements = []
    for job in ordered:
        if job.instance_count <= len(free):
            taken, free = free[: job.instance_count], free[job.instance_count :]
            placements.append(Placement(job.name, tuple(taken)))
        if not free:
            break
    return placements
