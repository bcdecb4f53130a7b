"""Weighted fair share across teams (pure): shares, borrowing, decayed usage and the queue order.

An admin groups users into teams and gives each team a **share** (a weight) of a pool's cores and a
**borrow limit**: how many cores beyond its share it may hold while others leave them idle (0: never
borrows; ``None``: any idle capacity). A team's **entitlement** is ``capacity × share / Σ shares``.

**Usage** is core-seconds decayed with a half-life, integrated exactly between passes (cores held
constant between two passes):  ``u(t + Δ) = u(t)·d + cores·h/ln 2·(1 − d)``, ``d = 2^(−Δ/h)``. A
half-life of 0 keeps no history: usage is the cores held now (Kueue's borrowing, without decay).

**The factor** is Slurm's classic fair-share factor, ``F = 2^(−U/S)`` with ``U`` the team's share of
all usage and ``S`` its share of all weights. Chosen over the plain ratio ``U/S`` because it is
bounded (0, 1] and defined everywhere — a team with no usage gets 1, not a division by zero — one
that used exactly its share gets 0.5, and it is monotone, so sorting by it is sorting by ``U/S``
while staying printable ("fair-share factor 0.73") and comparable across pools. Within a team,
users split the team's share equally and get the same factor against the team's usage.

**Queue order**: non-spot before spot (a spot job runs only on capacity nobody else wants), then
priority (high first), then the team's factor (highest first), then the user's, then submission
time, then name. Cheap at scale: factors are per team and user (tens to hundreds), so the jobs fall
into few classes, ranked once; each job is put in its class at C level and each class sorted FIFO.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter
from typing import Protocol, TypeVar

_K = TypeVar("_K", bound=Hashable)

DEFAULT_TEAM = "default"
SLURM_HALF_LIFE_S = 7 * 86400.0  # Slurm's PriorityDecayHalfLife default


@dataclass(frozen=True)
class TeamShare:
    name: str
    share: float  # a weight: only the ratios between teams matter
    borrow_limit: float | None = None  # cores beyond the entitlement it may hold (None: any idle)

    def __post_init__(self) -> None:
        if not (self.share > 0 and math.isfinite(self.share)):
            raise ValueError(f"team {self.name}: share must be a number > 0, not {self.share!r}")
        if self.borrow_limit is not None and self.borrow_limit < 0:
            raise ValueError(f"team {self.name}: borrow_limit must be >= 0 (or unset for no limit)")


@dataclass(frozen=True)
class FairShareConfig:
    teams: tuple[TeamShare, ...]
    user_teams: Mapping[str, str] = field(default_factory=dict)  # user -> team
    half_life_s: float = SLURM_HALF_LIFE_S  # 0: no history (usage = cores held now)
    default_team: str = DEFAULT_TEAM  # the team of a user no team lists

    def __post_init__(self) -> None:
        names = [team.name for team in self.teams]
        if len(set(names)) != len(names):
            raise ValueError("a team is listed twice")
        unknown = sorted(set(self.user_teams.values()) - set(names))
        if unknown:
            raise ValueError(f"users are mapped to unknown team {unknown[0]!r}")
        if self.half_life_s < 0:
            raise ValueError("half_life_s must be >= 0")

    def team_of(self, user: str) -> str:
        return self.user_teams.get(user, self.default_team)

    def shares(self) -> dict[str, float]:
        return {team.name: team.share for team in self.teams}


@dataclass(frozen=True, slots=True)  # slots: the order reads five fields of 100,000 jobs
class FairJob:
    """A queued job as the fair-share pass sees it."""

    name: str
    team: str
    user: str
    cores: int
    priority: int  # 1 low, 2 medium, 3 high (queue_settings)
    submitted_at: float
    spot: bool = False


@dataclass(frozen=True)
class Usage:
    """Decayed core-seconds per user (keyed by ``(team, user)``), as of ``at``."""

    at: float
    users: Mapping[tuple[str, str], float] = field(default_factory=dict)

    def teams(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for (team, _), value in self.users.items():
            out[team] = out.get(team, 0.0) + value
        return out


@dataclass(frozen=True)
class Factors:
    team: Mapping[str, float]
    user: Mapping[tuple[str, str], float]
    team_usage_share: Mapping[str, float]  # U: the team's part of all usage (0..1)
    team_share: Mapping[str, float]  # S: the team's part of all weights (0..1)


def entitlements(config: FairShareConfig, capacity: float) -> dict[str, float]:
    """Each team's cores by share: ``capacity × share / Σ shares``."""
    total = sum(team.share for team in config.teams)
    return {team.name: capacity * team.share / total for team in config.teams}


def caps(
    config: FairShareConfig, capacity: float, held: Mapping[str, float], *, borrow: bool
) -> dict[str, float]:
    """Cores each team may still take: its entitlement (+ its borrow limit when ``borrow``), less
    what it holds. A team missing from ``config`` gets no cap (it has no share to enforce)."""
    entitled = entitlements(config, capacity)
    out: dict[str, float] = {}
    for team in config.teams:
        extra = (capacity if team.borrow_limit is None else team.borrow_limit) if borrow else 0.0
        out[team.name] = entitled[team.name] + extra - held.get(team.name, 0.0)
    return out


def decay_usage(usage: Usage, now: float, held: Mapping[tuple[str, str], float], half_life_s: float) -> Usage:
    """Usage at ``now``, with ``held`` cores per ``(team, user)`` since ``usage.at``."""
    elapsed = max(0.0, now - usage.at)
    if half_life_s <= 0:
        return Usage(now, {key: float(cores) for key, cores in held.items() if cores})
    kept = 2.0 ** (-elapsed / half_life_s)
    gain = half_life_s / math.log(2) * (1.0 - kept)  # ∫ 2^(-s/h) ds over the interval
    users = {key: value * kept for key, value in usage.users.items()}
    for key, cores in held.items():
        if cores:
            users[key] = users.get(key, 0.0) + cores * gain
    return Usage(now, {key: value for key, value in users.items() if value > 1e-9})


def held_usage(cores: float, start: float, end: float, now: float, half_life_s: float) -> float:
    """CORES held over [START, END], decayed to NOW (half-life > 0): ``decay_usage``'s integral in
    closed form, ``cores × h/ln 2 × (2^(−(now−end)/h) − 2^(−(now−start)/h))`` — what a job's run
    adds to its user's usage, computed from the history instead of pass by pass."""
    end = min(end, now)
    start = min(start, end)
    rate = math.log(2) / half_life_s
    return cores / rate * (math.exp(-rate * (now - end)) - math.exp(-rate * (now - start)))


def factors(config: FairShareConfig, usage: Usage, queued_users: Iterable[tuple[str, str]] = ()) -> Factors:
    """Slurm's ``F = 2^(−U/S)`` per team, and per user within its team (equal user shares)."""
    shares = config.shares()
    for team, _ in queued_users:
        shares.setdefault(team, min(shares.values(), default=1.0))  # unlisted: the smallest share
    total_share = sum(shares.values())
    by_team = usage.teams()
    total_usage = sum(by_team.values())
    u_share = {t: (by_team.get(t, 0.0) / total_usage if total_usage > 0 else 0.0) for t in shares}
    s_share = {t: s / total_share for t, s in shares.items()}
    team_f = {t: 2.0 ** (-u_share[t] / s_share[t]) for t in shares}
    members: dict[str, set[str]] = {}
    for team, user in (*usage.users, *queued_users):
        members.setdefault(team, set()).add(user)
    user_f: dict[tuple[str, str], float] = {}
    for team, users in members.items():
        team_usage = by_team.get(team, 0.0)
        for user in users:
            part = usage.users.get((team, user), 0.0) / team_usage if team_usage > 0 else 0.0
            user_f[(team, user)] = 2.0 ** (-part * len(users))
    return Factors(team_f, user_f, u_share, s_share)


def fair_order(jobs: Sequence[FairJob], fair: Factors | None) -> list[FairJob]:
    """Non-spot first, priority, team factor, user factor, submission time, name. ``fair=None``:
    no fair share (spot last, then priority, then FIFO). A user is in one team (``team_of``); a
    team ``fair`` has no factor for (no share) goes after the teams that have one."""
    # Bucket sort: the jobs fall into few classes ((spot, priority, team, user): hundreds to a few
    # thousand), ranked once in Python; each job goes to its class's list at C level (map, no
    # Python call per job) and each class is sorted FIFO on its own. Sorting many short lists is
    # cheaper than three sorts of the whole queue (fewer comparisons: log of the class's size),
    # and no rank list or index permutation of 100,000 entries is built.
    if fair is None:
        plain = _classes(jobs, _PLAIN_KEY)
        return list(chain.from_iterable(plain[k] for k in sorted(plain, key=lambda k: (k[0], -k[1]))))
    team_f, user_f = fair.team, fair.user
    classes = _classes(jobs, _FAIR_KEY)
    ranked = sorted(
        classes,
        key=lambda k: (
            k[0],  # non-spot first
            -k[1],  # priority, high first
            -team_f.get(k[2], 0.0),  # a team with no share: after those with one
            -user_f.get((k[2], k[3]), 1.0),
            k[2],
            k[3],
        ),
    )
    return list(chain.from_iterable(map(classes.__getitem__, ranked)))


def _classes(jobs: Sequence[FairJob], key: Callable[[FairJob], _K]) -> dict[_K, list[FairJob]]:
    """The jobs by class (``key``), each class in FIFO order (submission time, then name)."""
    keys = list(map(key, jobs))
    classes: dict[_K, list[FairJob]] = {k: [] for k in set(keys)}
    deque(map(list.append, map(classes.__getitem__, keys), jobs), maxlen=0)
    for members in classes.values():
        if len(members) > 1:
            members.sort(key=_NAME)
            members.sort(key=_SUBMITTED)  # stable: (submitted_at, name) without a tuple per job
    return classes


_NAME = attrgetter("name")
_SUBMITTED = attrgetter("submitted_at")
_CORES = attrgetter("cores")
_STARTED = attrgetter("started_at")
# The classes: (spot, priority, team, user) — a user is in one team, so this is the user's class.
_FAIR_KEY: Callable[[FairJob], tuple[bool, int, str, str]] = attrgetter("spot", "priority", "team", "user")
_PLAIN_KEY: Callable[[FairJob], tuple[bool, int]] = attrgetter("spot", "priority")


def admit(
    ordered: Sequence[FairJob],
    free: float,
    room: Mapping[str, float] | None = None,
    held: Mapping[str, float] | None = None,
) -> list[FairJob]:
    """Jobs to start, in order, that fit the free cores (smaller ones backfill behind a job that does
    not fit) and their team's room (``caps``; a team not in ``room`` has no cap). Spot jobs ignore
    the cap: they only ever take capacity nobody else wants, and are preempted first. With ``held``
    (cores per team now), a job bigger than its team's cap may start while its team holds nothing:
    otherwise it could never run."""
    left = dict(room) if room is not None else None
    alone = {team for team, cores in held.items() if cores <= 0} if held is not None else set()
    if held is not None and left is not None:
        alone |= set(left) - set(held)
    started: list[FairJob] = []
    if free <= 0:
        return []
    smallest: int | None = None  # the smallest job's cores, read once a job does not fit
    for job in ordered:
        if free <= 0:
            break
        if job.cores > free:
            if smallest is None:
                smallest = min(map(_CORES, ordered))
            if free < smallest:
                break  # nothing left fits
            continue
        if left is not None and not job.spot and job.team in left:
            if job.cores > left[job.team] + 1e-9 and job.team not in alone:
                continue
            left[job.team] -= job.cores
            alone.discard(job.team)
        free -= job.cores
        started.append(job)
    return started


@dataclass(frozen=True)
class Holding:
    """A running job's claim on the pool, for telling borrowed capacity from entitled."""

    name: str
    team: str
    cores: int
    started_at: float
    spot: bool = False


class Holds(Protocol):
    """What ``borrowed`` reads of a running job (``Holding``, ``fair_pass.RunningJob``)."""

    @property
    def name(self) -> str: ...
    @property
    def team(self) -> str: ...
    @property
    def cores(self) -> int: ...
    @property
    def started_at(self) -> float: ...
    @property
    def spot(self) -> bool: ...


def borrowed(running: Sequence[Holds], entitled: Mapping[str, float]) -> set[str]:
    """The running jobs on borrowed capacity: per team, the most recently started jobs beyond its
    entitlement (a team's oldest jobs use its own share first); spot jobs always borrow."""
    # One pass over all running jobs in start order (two stable C-level sorts, no tuple per job),
    # each team's room counted down: 10,000 running jobs, no per-team lists.
    ordered = sorted(running, key=_NAME)
    ordered.sort(key=_STARTED)
    room = dict(entitled)
    out: set[str] = set()
    for job in ordered:
        if job.spot:
            out.add(job.name)
            continue
        left = room.get(job.team, 0.0) - job.cores
        room[job.team] = left
        if left < -1e-9:
            out.add(job.name)
    return out


__all__ = [
    "DEFAULT_TEAM",
    "Factors",
    "FairJob",
    "FairShareConfig",
    "Holding",
    "Holds",
    "TeamShare",
    "Usage",
    "admit",
    "borrowed",
    "caps",
    "decay_usage",
    "entitlements",
    "factors",
    "fair_order",
]
