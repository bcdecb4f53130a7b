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


@dataclass(frozen=True)
class Placement:
    job: str
    nodes: tuple[str, ...]


def queue_order(jobs: list[QueuedJob]) -> list[QueuedJob]:
    """Priority (high first), then submission time, then name. Two stable sorts on C-level keys:
    the same order as one sort on ``(-priority, submitted_at, name)``, a few times faster."""
    fifo = sorted(jobs, key=_FIFO)
    return sorted(fifo, key=_PRIORITY, reverse=True)  # reverse=True keeps equal keys in order


_FIFO = attrgetter("submitted_at", "name")
_PRIORITY = attrgetter("priority")


def schedule(jobs: list[QueuedJob], free_nodes: list[str]) -> list[Placement]:
    """Place as many queued jobs as fit on ``free_nodes`` (ids in a stable order)."""
    free = list(free_nodes)
    placements = []
    for job in queue_order(jobs):
        if job.instance_count <= len(free):
            taken, free = free[: job.instance_count], free[job.instance_count :]
            placements.append(Placement(job.name, tuple(taken)))
        if not free:
            break
    return placements
