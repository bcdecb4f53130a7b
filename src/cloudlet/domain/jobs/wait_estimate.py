"""A waiting job's estimated start, and its fair-share reason (pure).

The estimate replays the queue forward without backfill: each running job ends at its expected end
(``expected_remaining``: the mean remaining run of similar finished jobs that ran at least as long
as it has, capped by its timeout), and the jobs ahead start in queue order as cores free up, each
for its own expected duration. The job starts once the jobs ahead have started and its cores are
free. It is an estimate for "why isn't my job running?", refreshed every pass, not a reservation.

Two biases made the first version early (on the Philly trace under fair share with borrowing, the
estimate at submission was a median 0.58× the actual wait; docs/scheduling.md):

- **The median, not the mean.** Run times are heavy-tailed (Philly: median minutes, mean hours). A
  queue drains at ``capacity / mean duration``, so the replay's durations must be means; medians
  made the queue ahead look several times shorter than it was.
- **Later arrivals that go ahead.** Under fair share a job of a team that used more than its share
  is passed by every job that teams with a higher factor submit while it waits. The replay sees
  only the queue of now; ``ahead_load`` is the part of the pool those teams' recent arrivals ask
  for (``arrival_load``), and the wait is stretched by ``1 / (1 − load)`` — as a lower priority
  class of an M/G/1 queue progresses at the rate the higher classes leave.

What was left was spread, not bias, and ``paced_start`` narrows it by blending the replay with the
**recent pace** of starts (``recent_pace``: how long the last ``k`` starts took, Little's law with
the window sized to the question, known at the estimate):

- **The head of the queue** (the jobs ahead and this one need at most ``HEAD_FRACTION`` of the
  pool beyond what is free): the replay waits for each running job's *expected* end, a conditional
  mean over a heavy tail, while the job really waits for the *first* few of hundreds of ends. How
  long the pool took for its last ``ahead + 1`` starts is that time, measured (Philly, fair share
  with borrowing: waits under 10 min went from 3.5× over to a median 1.0×).
- **Deeper**: the geometric mean of the replay and the pace of the job's class — its team's last
  ``team ahead + 1`` starts under fair share (a job waits for its own team's queue, drained at the
  rate the team gets capacity: its share plus what it borrows), the pool's last ``ahead + 1``
  without teams. The two err on different things (the replay: the durations and who comes later;
  the pace: a team's rate that changes), so their mean errs less than either.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from cloudlet.domain.jobs.job_wait import WaitCode, WaitReason

_Key = TypeVar("_Key", bound=Hashable)

UNKNOWN_DURATION_S = 3600.0  # no timeout and no history: assume an hour
MAX_AHEAD_LOAD = 0.9  # a wait is stretched at most 10× for later arrivals going ahead
ARRIVAL_WINDOW_S = 3 * 3600.0  # recent arrivals predict the next: best of 1–12 h on Philly days 35–42
HEAD_FRACTION = 0.5  # a job this close to the head (part of the pool short) waits for the first ends
MIN_PACE_STARTS = 20  # fewer known starts than this say nothing of a pace (a new pool or team)


@dataclass(frozen=True)
class RunningEnd:
    cores: int
    ends_in_s: float  # expected seconds from now until it ends (expected_remaining)


@dataclass(frozen=True)
class Ahead:
    cores: int
    duration_s: float  # its expected run (expected_remaining with elapsed 0)


def expected_remaining(
    elapsed_s: float, history: Sequence[float], timeout_s: float | None = None, *, statistic: str = "mean"
) -> float:
    """Seconds a job that has run ``elapsed_s`` is expected to go on running. ``history``: durations
    of similar finished jobs, **sorted**. The mean (``statistic="median"``: the median) of those
    that ran longer than ``elapsed_s``, less ``elapsed_s``; with none, as long again as it has run
    (at least a minute) — long jobs tend to be longer than they look. Capped by the time left to
    ``timeout_s``."""
    start = bisect.bisect_right(history, elapsed_s)
    longer = len(history) - start
    if longer:
        if statistic == "median":
            mid = start + longer // 2
            typical = history[mid] if longer % 2 else (history[mid - 1] + history[mid]) / 2
        else:
            typical = math.fsum(history[start:]) / longer if start else math.fsum(history) / longer
        left = typical - elapsed_s
    elif history or elapsed_s > 0:
        left = max(60.0, elapsed_s)
    else:
        left = UNKNOWN_DURATION_S
    if timeout_s is not None:
        left = min(left, max(0.0, timeout_s - elapsed_s))
    return max(0.0, left)


def arrival_load(
    arrivals: Iterable[tuple[float, _Key, float]], now: float, window_s: float, capacity: float
) -> dict[_Key, float]:
    """Per key (``(team, priority)``), the part of the pool its arrivals of the last ``window_s``
    ask for: Σ cores × expected duration of the jobs submitted in ``(now − window_s, now]``, per
    second of the window, over ``capacity``. ``arrivals``: ``(submitted_at, key, cores × expected
    duration)``."""
    out: dict[_Key, float] = {}
    if window_s <= 0 or capacity <= 0:
        return out
    since = now - window_s
    for at, key, work in arrivals:
        if since < at <= now:
            out[key] = out.get(key, 0.0) + work / window_s / capacity
    return out


def load_ahead(
    team: str, priority: int, loads: Mapping[tuple[str, int], float], factors: Mapping[str, float]
) -> float:
    """The part of the pool that later arrivals going ahead of a job of ``team`` at ``priority``
    will take: those of a higher priority, and those of the same priority from other teams with a
    higher fair-share factor (``factors``; empty under FIFO or priority order). ``loads``: per
    ``(team, priority)``, as ``arrival_load``."""
    mine = factors.get(team)
    total = 0.0
    for (other, level), load in loads.items():
        passes = level == priority and other != team and mine is not None and factors.get(other, 0.0) > mine
        if level > priority or passes:
            total += load
    return total


def stretched(
    wait_s: float,
    team: str | None,
    priority: int,
    loads: Mapping[tuple[str, int], float],
    factors: Mapping[str, float] | None,
    *,
    spot: bool = False,
) -> float:
    """The replay's wait of a job of ``team`` at ``priority``, stretched for the later arrivals that
    will go ahead of it: ``wait / (1 − load)``, the load (``load_ahead``; capped at
    ``MAX_AHEAD_LOAD``) being the part of the pool that those arrivals ask for (``loads``, as
    ``arrival_load``: spot jobs left out, as they never go ahead). A spot job is passed by every
    arrival. ``factors``: the teams' fair-share factors (None or empty: no fair share, only higher
    priorities pass). The one rule the server's places (``queue_places.places``) and the
    simulator (``sim.policies``) both apply."""
    if wait_s <= 0.0 or not loads:
        return max(0.0, wait_s)
    load = sum(loads.values()) if spot else load_ahead(team or "", priority, loads, factors or {})
    return wait_s / (1.0 - min(max(load, 0.0), MAX_AHEAD_LOAD))


def estimate_start(
    cores: int,
    capacity: float,
    free: float,
    running: Sequence[RunningEnd],
    ahead: Sequence[Ahead],
    ahead_load: float = 0.0,
) -> float | None:
    """Seconds from now until a job of ``cores`` starts, behind ``ahead`` (queue order); ``None``
    when it never can (it needs more than the pool has). ``ahead_load`` (``load_ahead``): the part
    of the pool later arrivals that go ahead of it will take; the replay's wait is stretched by
    ``1 / (1 − load)`` (the load capped at ``MAX_AHEAD_LOAD``)."""
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
    return now / (1.0 - min(max(ahead_load, 0.0), MAX_AHEAD_LOAD))


def recent_pace(
    starts: Sequence[float], now: float, count: int, least: int = MIN_PACE_STARTS
) -> float | None:
    """Seconds the last ``count`` starts before ``now`` took: ``now`` less the ``count``-th most
    recent of ``starts`` (start times, **sorted**). At the current pace, the ``count``-th start from
    now is about that far off. None when fewer than ``count``, or than ``least``, are known (too
    little history to say)."""
    if count <= 0:
        return 0.0
    known = bisect.bisect_left(starts, now)  # only what happened before now
    if known < max(count, least):
        return None
    return max(0.0, now - starts[known - count])


def paced_start(
    replay_s: float | None,
    short: float,
    capacity: float,
    pool_pace_s: float | None,
    class_pace_s: float | None,
) -> float | None:
    """The estimated start from the replay (``estimate_start``; None: never) and the recent pace
    (module docstring). ``short``: the units the jobs ahead and this one need beyond those free
    now; within ``HEAD_FRACTION`` of ``capacity`` the job is at the head and ``pool_pace_s`` (the
    pool's last ``ahead + 1`` starts) is its estimate. Deeper, the geometric mean of the replay
    and ``class_pace_s`` (its team's last ``team ahead + 1`` starts; without teams, the pool's).
    A missing pace leaves the replay as it is."""
    if replay_s is None:
        return None
    if replay_s <= 0.0:
        return 0.0  # it starts now
    if short <= HEAD_FRACTION * capacity and pool_pace_s is not None:
        return pool_pace_s
    if class_pace_s is None:
        return replay_s
    return math.sqrt(max(replay_s, 1.0) * max(class_pace_s, 1.0))


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
    "ARRIVAL_WINDOW_S",
    "HEAD_FRACTION",
    "MAX_AHEAD_LOAD",
    "MIN_PACE_STARTS",
    "Ahead",
    "RunningEnd",
    "TeamStanding",
    "arrival_load",
    "dependency_reason",
    "estimate_start",
    "expected_remaining",
    "fair_share_reason",
    "load_ahead",
    "paced_start",
    "recent_pace",
    "spot_reason",
    "stretched",
]
