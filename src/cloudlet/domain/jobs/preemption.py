"""Which running jobs to preempt for entitled waiting jobs, and why (pure).

A waiting job is **entitled** to preempt when
- its team is below its share (its held cores plus the job fit its entitlement) while another team
  runs on borrowed capacity — the victim must be *borrowed* (``fair_share.borrowed``), whatever its
  priority: a share is a guarantee (Kueue's ``reclaimWithinCohort: Any``); or
- a higher priority waits behind a lower one — the victim has a lower priority and is of the same
  team or on borrowed capacity (a team's own share is not taken for another team's priority:
  Kueue's ``withinClusterQueue: LowerPriority``), or the victim is spot and the claimant is not.

Victims are those that cost the least to stop, in this order: spot first, then borrowed, then the
lowest priority, then the least work lost (the most recent checkpoint, or the most recent start when
there is none), then the newest. A claim is served only if its victims free enough cores for it (no
preemption that does not start the job).

Anti-thrash guards: a job is not preempted before ``min_run_s`` of running; at most
``max_per_hour`` preemptions in any hour (given the recent preemption times); a job preempted
``max_per_job`` times is never chosen again. The caller stops the victims through the
checkpoint-and-requeue path; a preempted job resumes from its last checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum


class PreemptReason(StrEnum):
    RECLAIM = "reclaim"  # a team below its share takes back capacity lent to another team
    PRIORITY = "priority"  # a higher-priority (or non-spot) job waits behind this one


@dataclass(frozen=True)
class Running:
    name: str
    team: str
    priority: int
    spot: bool
    started_at: float
    last_checkpoint_at: float | None  # None: no checkpoint yet (everything since start is lost)
    borrowed: bool
    cores: int
    preemptions: int = 0  # times this job was preempted before


@dataclass(frozen=True)
class Claim:
    """A waiting job, in queue order, and what its team holds now."""

    name: str
    team: str
    priority: int
    spot: bool
    cores: int
    team_held: float  # cores its team holds now (running)
    team_entitled: float  # its team's entitlement (fair_share.entitlements)


@dataclass(frozen=True)
class Guard:
    min_run_s: float = 600.0
    max_per_hour: int | None = 60
    max_per_job: int | None = 3


@dataclass(frozen=True)
class Preemption:
    victim: str
    for_job: str
    reason: PreemptReason
    lost_s: float  # run time since the victim's last checkpoint: work that will be redone
    message: str


def choose_victims(
    claims: Sequence[Claim],
    running: Sequence[Running],
    free_cores: float,
    now: float,
    guard: Guard = Guard(),
    recent: Sequence[float] = (),
    team_over: Mapping[str, float] | None = None,
) -> list[Preemption]:
    """Victims for the claims, served in order while the hourly budget lasts. ``recent``: the times
    of past preemptions (the last hour's count against ``max_per_hour``). ``team_over``: cores each
    team holds beyond its entitlement (a borrowed victim's team stops lending once it is back at
    its share); computed from ``running`` when not given."""
    budget = _budget(guard, recent, now)
    over = dict(team_over) if team_over is not None else _over(running)
    pool = [job for job in running if _eligible(job, guard, now)]
    pool.sort(key=lambda job: _cost(job, now))
    taken: set[str] = set()
    out: list[Preemption] = []
    free = free_cores
    # A claim that found too few victims: a later claim of the same kind needing as much or more
    # finds too few too (victims are only ever used up), so it is not searched again.
    failed: dict[tuple[str, int, bool, bool], float] = {}
    for claim in claims:
        if budget is not None and budget <= 0:
            break
        if claim.cores <= free:
            free -= claim.cores  # it fits without preempting anyone
            continue
        need = claim.cores - free
        kind = (claim.team, claim.priority, claim.spot, _below_share(claim))
        if need >= failed.get(kind, math.inf):
            continue
        picked = _pick_for(claim, pool, taken, over, need, budget)
        if picked is None:
            failed[kind] = min(need, failed.get(kind, math.inf))
            continue
        for job, reason in picked:
            taken.add(job.name)
            if reason is PreemptReason.RECLAIM:
                over[job.team] = over.get(job.team, 0.0) - job.cores
            out.append(_decision(job, claim, reason, now))
        free += sum(job.cores for job, _ in picked) - claim.cores
        if budget is not None:
            budget -= len(picked)
    return out


def _budget(guard: Guard, recent: Sequence[float], now: float) -> int | None:
    if guard.max_per_hour is None:
        return None
    return max(0, guard.max_per_hour - sum(1 for t in recent if now - t < 3600.0))


def _eligible(job: Running, guard: Guard, now: float) -> bool:
    if now - job.started_at < guard.min_run_s:
        return False
    return guard.max_per_job is None or job.preemptions < guard.max_per_job


def _lost_s(job: Running, now: float) -> float:
    since = job.started_at if job.last_checkpoint_at is None else max(job.started_at, job.last_checkpoint_at)
    return max(0.0, now - since)


def _cost(job: Running, now: float) -> tuple[bool, bool, int, float, float, str]:
    return (not job.spot, not job.borrowed, job.priority, _lost_s(job, now), -job.started_at, job.name)


def _reason(job: Running, claim: Claim, over: Mapping[str, float]) -> PreemptReason | None:
    if claim.spot:
        return None  # a spot job only takes capacity nobody wants: it never stops another
    if job.spot:
        return PreemptReason.PRIORITY
    if job.priority < claim.priority and (job.team == claim.team or job.borrowed):
        return PreemptReason.PRIORITY
    if _below_share(claim) and job.borrowed and job.team != claim.team and over.get(job.team, 0.0) > 1e-9:
        return PreemptReason.RECLAIM
    return None


def _below_share(claim: Claim) -> bool:
    return claim.team_held + claim.cores <= claim.team_entitled + 1e-9


def _pick_for(
    claim: Claim,
    pool: Sequence[Running],
    taken: set[str],
    over: Mapping[str, float],
    need: float,
    budget: int | None,
) -> list[tuple[Running, PreemptReason]] | None:
    lent = dict(over)
    picked: list[tuple[Running, PreemptReason]] = []
    for job in pool:
        if need <= 0 or (budget is not None and len(picked) >= budget):
            break
        if job.name in taken:
            continue
        reason = _reason(job, claim, lent)
        if reason is None:
            continue
        if reason is PreemptReason.RECLAIM:
            lent[job.team] = lent.get(job.team, 0.0) - job.cores
        picked.append((job, reason))
        need -= job.cores
    return picked if need <= 0 else None


def _over(running: Sequence[Running]) -> dict[str, float]:
    """Without entitlements to hand, a team's borrowed cores are those of its borrowed jobs."""
    out: dict[str, float] = {}
    for job in running:
        if job.borrowed and not job.spot:
            out[job.team] = out.get(job.team, 0.0) + job.cores
    return out


def _decision(job: Running, claim: Claim, reason: PreemptReason, now: float) -> Preemption:
    lost = _lost_s(job, now)
    if reason is PreemptReason.RECLAIM:
        why = (
            f"team {claim.team} is below its share ({claim.team_held:g} of {claim.team_entitled:g} cores) "
            f"and {job.name} runs on capacity team {job.team} borrowed"
        )
    elif job.spot and not claim.spot:
        why = f"{job.name} is spot tier and {claim.name} is not"
    else:
        why = f"{claim.name} (priority {claim.priority}) waits behind {job.name} (priority {job.priority})"
    return Preemption(job.name, claim.name, reason, lost, f"{why}; {lost:.0f} s since its last checkpoint")


__all__ = ["Claim", "Guard", "PreemptReason", "Preemption", "Running", "choose_victims"]
