"""A trace as teams on one pool, and the policies compared on it (``cloudlet compute what-if
--policy``).

Teams: the trace's group column (Philly's ``cluster``: virtual clusters) — the ``teams − 1``
groups with the most GPU-time each become a team, the rest share one team, ``other``. Every team
gets an equal share unless ``shares`` says otherwise. A trace without a group column is one team.

Priorities and tiers: traces such as Philly's have none, so each job gets one from its row number
(a hash, seeded): ``high_share`` high, ``low_share`` low, the rest medium; ``spot_share`` spot. The
same jobs get the same priority under every policy.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from cloudlet.domain.jobs.fair_share import TeamShare
from cloudlet.domain.jobs.preemption import Guard
from cloudlet.sim.policies import POLICIES, PoolJob, PoolSettings, simulate
from cloudlet.sim.policy_outcome import PolicyOutcome
from cloudlet.sim.trace import Trace, TraceJob

OTHER_TEAM = "other"


@dataclass(frozen=True)
class WorkloadShape:
    teams: int = 5  # teams − 1 largest groups, plus "other"
    high_share: float = 0.0  # Philly has no priorities: none unless asked for
    low_share: float = 0.0
    spot_share: float = 0.0
    seed: int = 0
    eta_sample: int = 1  # estimate the ETA of every n-th job
    shares: tuple[float, ...] | None = None  # weights, largest group first; None: equal


def team_names(jobs: Sequence[TraceJob], teams: int) -> list[str]:
    """The groups that become teams, by GPU-time (GPUs × duration; nodes when no GPUs), largest first."""
    load: dict[str, float] = {}
    for job in jobs:
        if job.group is not None:
            load[job.group] = load.get(job.group, 0.0) + (job.gpus or job.nodes or 1) * job.duration_s
    ranked = sorted(load, key=lambda g: (-load[g], g))
    if len(ranked) <= teams:
        return ranked or [OTHER_TEAM]
    return [*ranked[: teams - 1], OTHER_TEAM]


def _draw(row: int, seed: int) -> float:
    digest = hashlib.blake2b(f"{seed}:{row}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def pool_jobs(
    trace: Trace, shape: WorkloadShape, start_s: float = 0.0, days: float | None = None
) -> tuple[list[PoolJob], tuple[TeamShare, ...]]:
    """The jobs submitted in ``[start_s, start_s + days)`` (times shifted to start at 0) as teams'
    jobs, and the teams (chosen from the groups' GPU-time in that window)."""
    end = start_s + days * 86400.0 if days is not None else math.inf
    picked = [job for job in trace.jobs if start_s <= job.submit_s < end]
    names = team_names(picked, shape.teams)
    known = set(names)
    weights = shape.shares or tuple(1.0 for _ in names)
    if len(weights) != len(names):
        raise ValueError(f"{len(weights)} shares given for {len(names)} teams ({', '.join(names)})")
    teams = tuple(TeamShare(name, weight) for name, weight in zip(names, weights, strict=True))
    jobs = []
    for job in picked:
        team = job.group if job.group in known else (OTHER_TEAM if OTHER_TEAM in known else names[0])
        draw = _draw(job.row, shape.seed)
        priority = 3 if draw < shape.high_share else 1 if draw < shape.high_share + shape.low_share else 2
        spot = _draw(job.row, shape.seed + 1) < shape.spot_share
        jobs.append(
            PoolJob(
                name=f"j{job.row:09d}",
                team=str(team),
                user=str(team),  # the trace has no users: one user per team
                submit_at=job.submit_s - start_s,
                duration_s=job.duration_s,
                cores=max(1, job.gpus if job.gpus is not None else (job.nodes or 1)),
                priority=priority,
                spot=spot,
                eta=job.row % shape.eta_sample == 0,
            )
        )
    return jobs, teams


def _one(args: tuple[Sequence[PoolJob], PoolSettings, str]) -> PolicyOutcome:
    jobs, settings, name = args
    return simulate(jobs, settings, POLICIES[name])


def compare(
    jobs: Sequence[PoolJob], settings: PoolSettings, policies: Sequence[str], workers: int = 1
) -> list[PolicyOutcome]:
    """One run per policy (in ``workers`` processes), in the order given."""
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise ValueError(f"unknown policy {unknown[0]!r}; known: {', '.join(POLICIES)}")
    work = [(jobs, settings, name) for name in policies]
    if workers <= 1 or len(work) == 1:
        return [_one(w) for w in work]
    with ProcessPoolExecutor(max_workers=min(workers, len(work))) as pool:
        return list(pool.map(_one, work))


__all__ = ["OTHER_TEAM", "Guard", "WorkloadShape", "compare", "pool_jobs", "team_names"]
