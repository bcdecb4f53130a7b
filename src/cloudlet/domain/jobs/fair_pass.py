"""One decision pass over a pool (pure): the queue's order, the jobs to preempt and the jobs to start.

The server's reconcile pass and the simulator call this same function: it puts together
``fair_share`` (factors, order, caps, admission, borrowed capacity) and ``preemption``
(``choose_victims``). Usage is the caller's: it keeps ``fair_share.Usage`` between passes and
brings it up to date with ``fair_share.decay_usage`` (the server from its running jobs each pass,
the simulator exactly between events).

The victims' cores count as free for this pass's admission: the caller stops them (checkpoint and
requeue) and starts the admitted jobs in the same pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from cloudlet.domain.jobs import fair_share as fs
from cloudlet.domain.jobs.preemption import Claim, Guard, Preemption, Running, choose_victims

CLAIM_WINDOW = 256  # waiting jobs a pass considers for preemption (the scheduler's window)


@dataclass(frozen=True)
class PassPolicy:
    fair: bool = True  # order by fair share (False: spot last, priority, then FIFO)
    borrow: bool = True  # teams may go past their share on idle capacity (False: capped at it)
    preempt: bool = True  # reclaim borrowed capacity; make room for higher priorities
    guard: Guard = field(default_factory=Guard)


@dataclass(frozen=True)
class RunningJob:
    name: str
    team: str
    cores: int
    priority: int
    spot: bool
    started_at: float
    last_checkpoint_at: float | None = None
    preemptions: int = 0  # times preempted before


@dataclass(frozen=True)
class PassDecision:
    order: list[fs.FairJob]  # the queue in the policy's order (positions for "why isn't it running")
    preempt: list[Preemption]  # stop these first (checkpoint and requeue)
    start: list[fs.FairJob]  # then start these


def decide(
    config: fs.FairShareConfig,
    policy: PassPolicy,
    capacity: int,
    queued: Sequence[fs.FairJob],
    running: Sequence[RunningJob],
    usage: fs.Usage,
    now: float,
    recent_preemptions: Sequence[float] = (),
) -> PassDecision:
    held: dict[str, float] = {}
    for job in running:
        held[job.team] = held.get(job.team, 0.0) + job.cores
    free = capacity - sum(held.values())
    factors = fs.factors(config, usage) if policy.fair else None
    ordered = fs.fair_order(queued, factors)
    victims: list[Preemption] = []
    if policy.preempt and ordered:
        victims = _victims(
            config, policy.guard, capacity, ordered, running, held, free, now, recent_preemptions
        )
        stopped = {p.victim for p in victims}
        for job in running:
            if job.name in stopped:
                free += job.cores
                held[job.team] -= job.cores
    room = None if policy.borrow else fs.caps(config, capacity, held, borrow=False)
    return PassDecision(ordered, victims, fs.admit(ordered, free, room, held))


def _victims(
    config: fs.FairShareConfig,
    guard: Guard,
    capacity: int,
    ordered: Sequence[fs.FairJob],
    running: Sequence[RunningJob],
    held: dict[str, float],
    free: float,
    now: float,
    recent: Sequence[float],
) -> list[Preemption]:
    entitled = fs.entitlements(config, capacity)
    lent = fs.borrowed(running, entitled)
    window = ordered[:CLAIM_WINDOW]
    claims = [
        Claim(j.name, j.team, j.priority, j.spot, j.cores, held.get(j.team, 0.0), entitled.get(j.team, 0.0))
        for j in window
    ]
    # Only the jobs some claim of the window could stop get a view (10,000 running, most of them
    # on their team's own share): spot and borrowed jobs, and those of a lower priority than a
    # non-spot claim of their own team (preemption._reason); the guard's exclusions as well.
    # choose_victims would skip all the others: the same victims, a fraction of the objects.
    top: dict[str, int] = {}
    for claim in claims:
        if not claim.spot and claim.priority > top.get(claim.team, 0):
            top[claim.team] = claim.priority
    least, most = guard.min_run_s, guard.max_per_job
    views = [
        Running(
            j.name,
            j.team,
            j.priority,
            j.spot,
            j.started_at,
            j.last_checkpoint_at,
            j.name in lent,
            j.cores,
            j.preemptions,
        )
        for j in running
        if (j.spot or j.name in lent or j.priority < top.get(j.team, 0))
        and now - j.started_at >= least
        and (most is None or j.preemptions < most)
    ]
    over = {team: held.get(team, 0.0) - share for team, share in entitled.items()}
    return choose_victims(claims, views, free, now, guard, recent, over)


__all__ = ["CLAIM_WINDOW", "PassDecision", "PassPolicy", "RunningJob", "decide"]
