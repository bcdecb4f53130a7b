"""A waiting job's estimated start, and its fair-share reason (pure).

The estimate replays the queue forward without backfill: each running job ends at its expected end
(``expected_remaining``: the median remaining run of similar finished jobs that ran at least as long
as it has, capped by its timeout), and the jobs ahead start in queue order as cores free up, each
for its own expected duration. The job starts once the jobs ahead have started and its cores are
free. It is an estimate for "why isn't my job running?", refreshed every pass, not a reservation.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from cloudlet.domain.jobs.job_wait import WaitCode, WaitReason

UNKNOWN_DURATION_S = 3600.0  # no timeout and no history: assume an hour


@dataclass(frozen=True)
class RunningEnd:
    cores: int
    ends_in_s: float  # expected seconds from now until it ends (expected_remaining)


@dataclass(frozen=True)
class Ahead:
    cores: int
    duration_s: float  # its expected run (expected_remaining with elapsed 0)


def expected_remaining(elapsed_s: float, history: Sequence[float], timeout_s: float | None = None) -> float:
    """Seconds a job that has run ``elapsed_s`` is expected to go on running. ``history``: durations
    of similar finished jobs, **sorted**. The median of those that ran longer than ``elapsed_s``,
    less ``elapsed_s``; with none, as long again as it has run (at least a minute) — long jobs tend
    to be longer than they look. Capped by the time left to ``timeout_s``."""
    start = bisect.bisect_right(history, elapsed_s)
    longer = len(history) - start
    if longer:
        mid = start + longer // 2
        median = history[mid] if longer % 2 else (history[mid - 1] + history[mid]) / 2
        left = median - elapsed_s
    elif history or elapsed_s > 0:
        left = max(60.0, elapsed_s)
    else:
        left = UNKNOWN_DURATION_S
    if timeout_s is not None:
        left = min(left, max(0.0, timeout_s - elapsed_s))
    return max(0.0, left)


def estimate_start(
    cores: int, capacity: float, free: float, running: Sequence[RunningEnd], ahead: Sequence[Ahead]
) -> float | None:
    """Seconds from now until a job of ``cores`` starts, behind ``ahead`` (queue order); ``None``
    when it never can (it needs more than the pool has)."""
    if cores > capacity:
        return None
    ends = [(job.ends_in_s, job.cores) for job in running]
    heapq.heapify(ends)
    now = 0.0
    for job in (*ahead, Ahead(cores, 0.0)):
        if job.cores > capacity:
            continue  # a job that can never start holds no one back (it is reported apart)
        while free < job.cores and ends:
            when, freed = heapq.heappop(ends)
            now = max(now, when)
            free += freed
        if free < job.cores:
            return None
        free -= job.cores
        heapq.heappush(ends, (now + job.duration_s, job.cores))
    return now


@dataclass(frozen=True)
class TeamStanding:
    team: str
    held_cores: float
    entitled_cores: float
    usage_share: float  # U: the team's part of the pool's decayed usage (0..1)
    share: float  # S: the team's part of all shares (0..1)
    factor: float  # 2^(-U/S)


def fair_share_reason(standing: TeamStanding, ahead_other_teams: int) -> WaitReason:
    """The job waits behind jobs of teams that used less of their share lately, or its team is at
    its share without room to borrow."""
    usage = (
        f"team {standing.team} has used {standing.usage_share:.0%} of the pool lately "
        f"against a share of {standing.share:.0%}"
    )
    held = f"holds {standing.held_cores:g} of its {standing.entitled_cores:g} cores"
    if ahead_other_teams:
        return WaitReason(
            WaitCode.FAIR_SHARE,
            f"{usage} (fair-share factor {standing.factor:.2f}; {held}): "
            f"{_jobs(ahead_other_teams)} of teams that used less go first",
        )
    return WaitReason(WaitCode.FAIR_SHARE, f"{usage}; it {held} and may not borrow more")


def spot_reason(ahead: int) -> WaitReason:
    return WaitReason(
        WaitCode.SPOT,
        f"spot tier: it runs only on capacity no other job wants ({_jobs(ahead)} ahead)",
    )


def _jobs(count: int) -> str:
    return f"{count} job{'' if count == 1 else 's'}"


def dependency_reason(waiting_for: Sequence[str]) -> WaitReason:
    names = ", ".join(waiting_for[:3]) + (f" and {len(waiting_for) - 3} more" if len(waiting_for) > 3 else "")
    return WaitReason(WaitCode.DEPENDENCY, f"waits for {names} to complete")


__all__ = [
    "Ahead",
    "RunningEnd",
    "TeamStanding",
    "dependency_reason",
    "estimate_start",
    "expected_remaining",
    "fair_share_reason",
    "spot_reason",
]
