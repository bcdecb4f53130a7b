"""Every queued job's place, reason and estimated start from one pass over its compute's queue (pure).

``services.jobs.job_wait`` reads a compute's queue once (in the scheduler's order) and asks this
module for all of it at once: per job its position, what is ahead of it (jobs, cores, nodes, higher
priorities, other teams of its band, non-spot jobs) and the estimated start from **one** replay of
the queue (``replay_starts``: ``wait_estimate.estimate_start``'s rule, each job's start recorded
as the replay passes it), blended with the compute's recent pace of starts where given (``Pace``;
``wait_estimate.paced_start``, the simulator's rule). So a compute with 10,000 queued jobs costs one
pass of 10,000 steps per refresh, not 10,000 estimates of up to 10,000 steps each.

Also here: the one reason a queued job is given
(``queue_reason``): what stops the compute first (a lock, quota, nodes on their way), else why the
jobs ahead go first (spot, priority, fair share), else the capacity it waits for.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.domain.jobs.job_wait import WaitCode, WaitReason
from cloudlet.domain.jobs.pipeline_dag import DagStep
from cloudlet.domain.jobs.wait_estimate import (
    HEAD_FRACTION,
    RunningEnd,
    TeamStanding,
    dependency_reason,
    fair_share_reason,
    paced_start,
    recent_pace,
    spot_reason,
    stretched,
)


@dataclass(frozen=True, slots=True)
class Queued:
    """A queued job as its compute's queue holds it, in the scheduler's order."""

    id: int
    team: str | None  # its team under fair share (None: no fair share on this compute)
    priority: int
    spot: bool
    nodes: int  # its instance_count
    units: int  # what it takes of the compute's capacity (nodes of a cluster, vCPUs of an instance)
    cores: int  # the cores it needs, for the sentences
    duration_s: float  # its expected run (wait_estimate.expected_remaining with elapsed 0)
    canceled: bool = False  # cancel requested: the scheduler drops it, it holds no one back


@dataclass(frozen=True, slots=True)
class Place:
    """Where a queued job stands: 1-based ``position`` among the jobs that will run, what is ahead
    of it, and ``start_in_s`` (seconds after the queue was read; None: never under the current
    limits, e.g. it needs more than the compute can hold)."""

    position: int
    ahead: int
    ahead_cores: int
    ahead_nodes: int
    ahead_higher_priority: int
    ahead_other_teams: int  # of its priority and tier, other teams: fair share put them first
    ahead_not_spot: int
    start_in_s: float | None
    waits_for_boot: bool = False  # its start waits for a node to come up (starting, or to be made)


@dataclass(frozen=True)
class Pace:
    """The compute's recent starts as known at ``now`` (the queue's read): start times, sorted, of
    the pool and of each team (``wait_estimate.recent_pace`` reads them)."""

    now: float
    pool: Sequence[float]
    teams: Mapping[str, Sequence[float]]


def replay_starts(
    capacity: float,
    free: float,
    running: Sequence[RunningEnd],
    queue: Sequence[Queued],
    arrivals: Sequence[tuple[float, int]] = (),
) -> tuple[list[float | None], list[bool]]:
    """Seconds from now until each queued job starts, replaying the queue in order without
    backfill (``wait_estimate.estimate_start``'s rule): each running job ends at its expected end,
    each queued job starts once the jobs ahead have and its units are free, then runs for its
    ``duration_s``. A canceled job or one bigger than ``capacity`` gets None and holds no one back.
    ``arrivals``: (seconds from now, units) of nodes not up yet (starting, or still to be made)
    that ``free`` leaves out; a job that takes units of one starts no sooner than it is up, and
    is flagged where that boot is what it waits for last (the second list)."""
    ends: list[tuple[float, int, bool]] = [(job.ends_in_s, job.cores, False) for job in running]
    ends += [(at, units, True) for at, units in arrivals]
    heapq.heapify(ends)
    now = 0.0
    by_boot = False  # ``now`` is when a node came up (not when a job ended)
    up, new = float(free), 0.0  # free units of nodes that are up now / that came up in the replay
    out: list[float | None] = []
    booted: list[bool] = []
    for job in queue:
        if job.canceled or job.units > capacity:
            out.append(None)
            booted.append(False)
            continue
        while up + new < job.units and ends:
            when, freed, arrival = heapq.heappop(ends)
            if when >= now:
                now, by_boot = when, arrival
            if arrival:
                new += freed
            else:
                up += freed
        if up + new < job.units:  # the running jobs free too little: never, under these limits
            out.append(None)
            booted.append(False)
            continue
        from_new = max(0.0, job.units - up)  # up nodes first: a new node only where they run out
        up -= job.units - from_new
        new -= from_new
        heapq.heappush(ends, (now + job.duration_s, job.units, False))
        out.append(now)
        booted.append(from_new > 0 and by_boot and now > 0)
    return out, booted


def places(
    queue: Sequence[Queued],
    capacity: float,
    free: float,
    running: Sequence[RunningEnd],
    factors: Mapping[str, float] | None = None,
    *,
    arrivals: Sequence[tuple[float, int]] = (),
    pace: Pace | None = None,
    loads: Mapping[tuple[str, int], float] | None = None,
) -> list[Place | None]:
    """Every job's ``Place`` in one pass (None for a canceled one). ``factors``: each team's
    fair-share factor; ``ahead_other_teams`` then counts the jobs ahead of its band (tier and
    priority) whose team has a higher factor — those fair share puts first (a team missing from it
    counts as 0). Without ``factors``, every other team's job of its band ahead counts.
    ``arrivals``: nodes not up yet (``replay_starts``). ``pace``: the recent starts, blended into
    each replayed start (``wait_estimate.paced_start``: the pool's pace at the head of the queue,
    the team's — the pool's for a job without one — deeper); not into a start that waits for a
    node's boot (the boot, not the others' ends, decides it). ``loads``: per ``(team, priority)``
    the part of the pool its recent submissions ask for (``wait_estimate.arrival_load``; the team
    ``""`` without fair share); each replayed start is stretched for those that will go ahead of
    the job (``wait_estimate.stretched``, before the pace), again not one that waits for a boot."""
    starts, booted = replay_starts(capacity, free, running, queue, arrivals)
    head = HEAD_FRACTION * capacity
    out: list[Place | None] = []
    ahead = cores = nodes = not_spot = units = 0
    by_team: dict[str, int] = {}  # team → its jobs ahead, for its pace
    by_priority: dict[int, int] = {}
    by_band: dict[tuple[bool, int], dict[str | None, int]] = {}  # band → team → jobs ahead
    for job, start, boot in zip(queue, starts, booted, strict=True):
        if job.canceled:
            out.append(None)
            continue
        higher = sum(count for priority, count in by_priority.items() if priority > job.priority)
        band = (job.spot, job.priority)
        teams = by_band.setdefault(band, {})
        others = 0
        if job.team is not None:
            if factors is None:
                others = sum(count for team, count in teams.items() if team != job.team)
            else:  # teams are few (tens): a sum over them per job
                own = factors.get(job.team, 0.0)
                others = sum(
                    count
                    for team, count in teams.items()
                    if team != job.team and factors.get(team or "", 0.0) > own
                )
        if loads and start is not None and not boot:
            start = stretched(start, job.team, job.priority, loads, factors, spot=job.spot)
        estimate = start
        if pace is not None and start is not None and start > 0.0 and not boot:
            short = units + job.units - free
            # Only the pace paced_start will use is read: the pool's at the head (and for a job
            # without a team), else the team's (a bisect each, over up to 10,000 jobs a refresh).
            pool_pace = (
                recent_pace(pace.pool, pace.now, ahead + 1) if job.team is None or short <= head else None
            )
            class_pace = (
                pool_pace
                if job.team is None or pool_pace is not None
                else recent_pace(pace.teams.get(job.team, ()), pace.now, by_team.get(job.team, 0) + 1)
            )
            estimate = paced_start(start, short, capacity, pool_pace, class_pace)
        out.append(Place(ahead + 1, ahead, cores, nodes, higher, others, not_spot, estimate, boot))
        ahead += 1
        cores += job.cores
        nodes += job.nodes
        if job.units <= capacity:  # the replay skips a job that never fits: it takes nothing
            units += job.units
        if job.team is not None:
            by_team[job.team] = by_team.get(job.team, 0) + 1
        not_spot += not job.spot
        by_priority[job.priority] = by_priority.get(job.priority, 0) + 1
        teams[job.team] = teams.get(job.team, 0) + 1
    return out


@dataclass(frozen=True)
class Standing:
    """A team's fair-share standing, and whether it is at the most it may hold (share + borrow)."""

    team: TeamStanding
    at_cap: bool


def queue_reason(base: WaitReason, place: Place | None, spot: bool, standing: Standing | None) -> WaitReason:
    """The one reason for a queued job. ``base`` is ``job_wait``'s (the compute's own limits first:
    a lock, quota, nodes on their way, then the capacity it waits for). Where that base is only
    "the capacity is taken" (cluster at max, no free vCPU, next in line, behind higher priorities),
    the reason the jobs ahead go first says more: the job is spot, higher priorities are ahead,
    other teams are ahead by fair share, or its team is at its share and may not borrow."""
    if base.code not in _ORDER_BOUND or place is None:
        return base
    if spot and place.ahead_not_spot:
        return spot_reason(place.ahead)
    if place.ahead_higher_priority:
        return WaitReason(
            WaitCode.BEHIND_HIGHER_PRIORITY,
            f"{_jobs(place.ahead_higher_priority)} of higher priority go first"
            + (f" ({_jobs(place.ahead)} ahead in all)" if place.ahead > place.ahead_higher_priority else ""),
        )
    if standing is not None and (place.ahead_other_teams or standing.at_cap):
        return fair_share_reason(standing.team, place.ahead_other_teams)
    return base


_ORDER_BOUND = frozenset(
    {WaitCode.CLUSTER_AT_MAX, WaitCode.NO_FREE_VCPU, WaitCode.NEXT, WaitCode.BEHIND_HIGHER_PRIORITY}
)


# A node's boot when a compute has no history of its own: a local process starts in a second or
# two, a host reached over SSH or a Slurm allocation in tens of seconds, a pod or a cloud VM in
# minutes (Azure ML's cluster nodes take 3-5 min from request to ready).
BOOT_DEFAULT_S = {"local": 5.0, "ssh": 30.0, "slurm": 60.0, "kube": 60.0}
BOOT_FALLBACK_S = 180.0


@dataclass(frozen=True, slots=True)
class Boot:
    """How long a node of a compute takes from its request to ready, and what says so."""

    seconds: float
    basis: str  # in words: "the median of this compute's last 3 node starts", or the default


def boot_estimate(history: Sequence[float], provider: str) -> Boot:
    """The median of ``history`` (seconds from a node's request to its agent's registration, the
    compute's newest starts), else ``provider``'s default (``BOOT_DEFAULT_S``)."""
    if history:
        ordered = sorted(history)
        middle = len(ordered) // 2
        median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
        starts = f"{len(ordered)} node start{'' if len(ordered) == 1 else 's'}"
        return Boot(median, f"the median of this compute's last {starts}")
    default = BOOT_DEFAULT_S.get(provider, BOOT_FALLBACK_S)
    return Boot(default, f"the {provider} provider's usual boot (no node of this compute has started yet)")


def in_words(seconds: float) -> str:
    """``in ~N min`` for an estimated start (``in < 1 min``, ``in ~2 h 5 min``)."""
    minutes = math.ceil(max(0.0, seconds) / 60)
    if seconds < 60:
        return "in < 1 min"
    if minutes < 60:
        return f"in ~{minutes} min"
    hours, rest = divmod(minutes, 60)
    return f"in ~{hours} h {rest} min" if rest else f"in ~{hours} h"


def position_text(position: int | None, deeper_than: int | None) -> str | None:
    """``3``, or ``10,000+`` for a job deeper than the part of the queue read."""
    if position is not None:
        return f"{position:,}"
    return f"{deeper_than:,}+" if deeper_than else None


def standings(
    factors_team: Mapping[str, float],
    usage_share: Mapping[str, float],
    share: Mapping[str, float],
    held: Mapping[str, float],
    entitled: Mapping[str, float],
    cap: Mapping[str, float],
) -> dict[str, Standing]:
    """Each team's ``Standing`` from ``fair_share.factors`` and ``entitlements``/``caps`` (``cap``:
    cores it may still take with borrowing; ≤ 0 is at its cap)."""
    return {
        team: Standing(
            TeamStanding(
                team,
                held.get(team, 0.0),
                entitled.get(team, 0.0),
                usage_share.get(team, 0.0),
                share.get(team, 0.0),
                factor,
            ),
            cap.get(team, math.inf) <= 1e-9,
        )
        for team, factor in factors_team.items()
    }


def steps_waiting(steps: Sequence[DagStep]) -> dict[str, WaitReason]:
    """A pipeline's steps not started yet, each with its ``dependency`` reason: the upstream steps
    it waits for (a pipeline submits a step once all its upstream steps completed)."""
    done = {step.key for step in steps if step.status == JobStatus.COMPLETED.value}
    out: dict[str, WaitReason] = {}
    for step in steps:
        if step.status == "NotStarted":
            waiting_for = [up for up in step.upstream if up not in done]
            if waiting_for:
                out[step.key] = dependency_reason(waiting_for)
    return out


def _jobs(count: int) -> str:
    return f"{count} job{'' if count == 1 else 's'}"


__all__ = [
    "BOOT_DEFAULT_S",
    "Boot",
    "Pace",
    "Place",
    "Queued",
    "Standing",
    "boot_estimate",
    "in_words",
    "places",
    "position_text",
    "queue_reason",
    "replay_starts",
    "standings",
    "steps_waiting",
]
