"""What a policy run measured: team usage against shares (Jain's index), utilisation, waits per team
and of teams under their share, work lost to preemption, preemptions per job and the ETA's error at
submission.

**Jain's index of team usage against shares, over each day with all teams busy** (issue 31), made
measurable: a team is *busy* in an hour when its demand — cores it holds plus cores its queued jobs
ask for — is at least its entitlement for ``busy_fraction`` of the hour (busy as demand, not as a
queue: fair share empties queues, demand stays). In an hour where every team is busy, each team is
owed exactly its entitlement (``min(demand, entitlement)``, and the entitlements sum to the pool),
so ``x = core-hours held / (entitlement × hours)`` and Jain's index over the teams' ``x`` is 1 only
when each got its share. Per day: the index over the day's all-busy hours together (each team's
core-hours summed over them); days without such an hour have no figure. The policy-independent
companion (``due_*``) counts every contended day, at each instant over the teams that want
anything, ``min(held, share) / min(wanted, share)``.

**The team under its share**, job by job: a job counts when, at its submission, its team held less
than its entitlement — the jobs fair share is for. Their p95 wait is ``under_share_wait_p95_s``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from cloudlet.sim.whatif import percentile

DAY_S = 86400.0
HOUR_S = 3600.0
ETA_MIN_WAIT_S = 60.0  # the ETA's error is measured on jobs that waited at least this long


class _Spec(Protocol):
    @property
    def team(self) -> str: ...
    @property
    def cores(self) -> int: ...
    @property
    def submit_at(self) -> float: ...


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index: (Σx)² / (n·Σx²); 1 when all equal, 1/n when one takes everything."""
    squares = sum(x * x for x in values)
    return (sum(values) ** 2) / (len(values) * squares) if squares > 0 else 1.0


def _due_jain(held: Mapping[str, float], demand: Mapping[str, float], entitled: Mapping[str, float]) -> float:
    parts = [
        min(held.get(team, 0.0), share) / min(wanted, share)
        for team, share in entitled.items()
        if (wanted := demand.get(team, 0.0)) > 0
    ]
    return jain(parts) if parts else 1.0


@dataclass(frozen=True)
class TeamOutcome:
    team: str
    entitled: float  # cores by share
    usage_ratio: float  # cores held on average / entitled (over the measured span)
    busy_share: float  # part of the span its demand (held + queued) reached its entitlement
    jobs: int
    wait_p50_s: float
    wait_p95_s: float
    under_share_jobs: int = 0  # its jobs submitted while it held less than its entitlement
    under_share_wait_p95_s: float = math.nan


@dataclass(frozen=True)
class PolicyOutcome:
    policy: str
    capacity: int
    span_s: float
    utilisation: float  # cores held / capacity over the span (lost runs included: they held cores)
    jain_days: int  # days with at least one hour in which every team was busy (module docstring)
    jain_min: float  # over those days: Jain of each team's usage / its share in the all-busy hours
    jain_mean: float
    busy_hours: int  # hours in which every team was busy
    jain_by_day: tuple[tuple[int, int, float], ...]  # (day, all-busy hours, Jain) per such day
    # Demand-aware, every contended day (total demand >= capacity at least half the day): at each
    # instant, Jain over the teams that want anything of x = min(held, share) / min(wanted, share)
    # (the part of its due each team got: borrowing idle capacity is not unfair), time-weighted.
    due_days: int
    due_jain_min: float
    due_jain_mean: float
    teams: tuple[TeamOutcome, ...]
    core_hours: float  # run, all attempts
    lost_core_hours: float
    preemptions: int
    max_preemptions: int  # of one job
    jobs: int
    jobs_too_big: int
    eta_jobs: int  # jobs that waited >= ETA_MIN_WAIT_S with an estimate at submission
    eta_median_error: float  # |estimate − actual| / actual, median over eta_jobs
    wait_p95_s: float
    under_share_jobs: int = 0  # jobs submitted while their team held less than its entitlement
    under_share_wait_p95_s: float = math.nan

    @property
    def lost_share(self) -> float:
        return self.lost_core_hours / self.core_hours if self.core_hours else 0.0

    def team(self, name: str) -> TeamOutcome:
        return next(t for t in self.teams if t.team == name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "capacity": self.capacity,
            "span_h": round(self.span_s / 3600, 3),
            "utilisation": round(self.utilisation, 4),
            "jain_days": self.jain_days,
            "jain_min": round(self.jain_min, 4),
            "jain_mean": round(self.jain_mean, 4),
            "busy_hours": self.busy_hours,
            "jain_by_day": [{"day": d, "hours": h, "jain": round(j, 4)} for d, h, j in self.jain_by_day],
            "due_days": self.due_days,
            "due_jain_min": round(self.due_jain_min, 4),
            "due_jain_mean": round(self.due_jain_mean, 4),
            "core_hours": round(self.core_hours, 2),
            "lost_core_hours": round(self.lost_core_hours, 2),
            "lost_share": round(self.lost_share, 5),
            "preemptions": self.preemptions,
            "max_preemptions_per_job": self.max_preemptions,
            "jobs": self.jobs,
            "jobs_too_big": self.jobs_too_big,
            "eta_jobs": self.eta_jobs,
            "eta_median_error": round(self.eta_median_error, 4),
            "wait_p95_s": round(self.wait_p95_s, 1),
            "under_share_jobs": self.under_share_jobs,
            "under_share_wait_p95_s": round(self.under_share_wait_p95_s, 1),
            "teams": [
                {
                    "team": t.team,
                    "entitled": round(t.entitled, 2),
                    "usage_ratio": round(t.usage_ratio, 4),
                    "busy_share": round(t.busy_share, 4),
                    "jobs": t.jobs,
                    "wait_p50_s": round(t.wait_p50_s, 1),
                    "wait_p95_s": round(t.wait_p95_s, 1),
                    "under_share_jobs": t.under_share_jobs,
                    "under_share_wait_p95_s": round(t.under_share_wait_p95_s, 1),
                }
                for t in self.teams
            ],
        }


@dataclass
class Tally:
    teams: list[str]
    entitled: Mapping[str, float]
    capacity: int
    busy_fraction: float = 0.9  # an hour counts for Jain when every team wanted its share this long
    too_big: int = 0
    held_s: dict[str, float] = field(default_factory=dict)  # team -> core-seconds held
    busy_s: dict[str, float] = field(default_factory=dict)  # team -> seconds its demand >= share
    hour_usage: dict[int, dict[str, float]] = field(default_factory=dict)  # hour -> team -> core-s
    hour_busy: dict[int, dict[str, float]] = field(default_factory=dict)  # hour -> team -> s busy
    day_due: dict[int, list[float]] = field(default_factory=dict)  # day -> [Σ jain·dt, contended s]
    run_s: float = 0.0  # core-seconds run
    lost_s: float = 0.0  # core-seconds lost to preemption
    preemptions: int = 0
    max_preemptions: int = 0
    waits: dict[str, list[float]] = field(default_factory=dict)
    under_share_waits: dict[str, list[float]] = field(default_factory=dict)
    eta_errors: list[float] = field(default_factory=list)

    def add_interval(
        self, start: float, end: float, held: Mapping[str, float], demand: Mapping[str, float]
    ) -> None:
        while end > start:
            hour = int(start // HOUR_S)
            cut = min(end, (hour + 1) * HOUR_S)
            dt = cut - start
            usage = self.hour_usage.setdefault(hour, {})
            busy = self.hour_busy.setdefault(hour, {})
            due = self.day_due.setdefault(int(start // DAY_S), [0.0, 0.0])
            if sum(demand.values()) >= self.capacity:
                due[0] += dt * _due_jain(held, demand, self.entitled)
                due[1] += dt
            for team in self.teams:
                cores = held.get(team, 0.0)
                usage[team] = usage.get(team, 0.0) + cores * dt
                self.held_s[team] = self.held_s.get(team, 0.0) + cores * dt
                if demand.get(team, 0.0) >= self.entitled[team] - 1e-9:
                    busy[team] = busy.get(team, 0.0) + dt
                    self.busy_s[team] = self.busy_s.get(team, 0.0) + dt
            start = cut

    def ran(self, spec: _Spec, seconds: float) -> None:
        self.run_s += spec.cores * seconds

    def lost(self, spec: _Spec, seconds: float) -> None:
        self.lost_s += spec.cores * seconds
        self.preemptions += 1

    def finished(
        self,
        spec: _Spec,
        first_started_at: float,
        preemptions: int,
        eta_s: float | None,
        under_share: bool = False,
    ) -> None:
        wait = first_started_at - spec.submit_at
        self.waits.setdefault(spec.team, []).append(wait)
        if under_share:
            self.under_share_waits.setdefault(spec.team, []).append(wait)
        self.max_preemptions = max(self.max_preemptions, preemptions)
        if eta_s is not None and wait >= ETA_MIN_WAIT_S:
            self.eta_errors.append(abs(eta_s - wait) / wait if math.isfinite(eta_s) else math.inf)

    def outcome(self, policy: str, span_s: float) -> PolicyOutcome:
        by_day = self._jain_by_day(span_s)
        indices = [j for _, _, j in by_day]
        dues = [
            total / seconds
            for day, (total, seconds) in sorted(self.day_due.items())
            if (day + 1) * DAY_S <= span_s and seconds >= DAY_S / 2
        ]
        span = max(span_s, 1e-9)
        teams = tuple(
            TeamOutcome(
                team,
                self.entitled[team],
                self.held_s.get(team, 0.0) / span / self.entitled[team],
                self.busy_s.get(team, 0.0) / span,
                len(self.waits.get(team, [])),
                percentile(self.waits.get(team, []), 50),
                percentile(self.waits.get(team, []), 95),
                len(self.under_share_waits.get(team, [])),
                percentile(self.under_share_waits.get(team, []), 95),
            )
            for team in self.teams
        )
        every_wait = [w for waits in self.waits.values() for w in waits]
        under = [w for waits in self.under_share_waits.values() for w in waits]
        return PolicyOutcome(
            policy=policy,
            capacity=self.capacity,
            span_s=span_s,
            utilisation=sum(self.held_s.values()) / (self.capacity * span),
            jain_days=len(indices),
            jain_min=min(indices, default=math.nan),
            jain_mean=statistics.fmean(indices) if indices else math.nan,
            busy_hours=sum(h for _, h, _ in by_day),
            jain_by_day=tuple(by_day),
            due_days=len(dues),
            due_jain_min=min(dues, default=math.nan),
            due_jain_mean=statistics.fmean(dues) if dues else math.nan,
            teams=teams,
            core_hours=self.run_s / 3600,
            lost_core_hours=self.lost_s / 3600,
            preemptions=self.preemptions,
            max_preemptions=self.max_preemptions,
            jobs=len(every_wait),
            jobs_too_big=self.too_big,
            eta_jobs=len(self.eta_errors),
            eta_median_error=statistics.median(self.eta_errors) if self.eta_errors else math.nan,
            wait_p95_s=percentile(every_wait, 95),
            under_share_jobs=len(under),
            under_share_wait_p95_s=percentile(under, 95),
        )

    def _jain_by_day(self, span_s: float) -> list[tuple[int, int, float]]:
        """Per day with all-busy hours: (day, hours, Jain of core-hours / entitlement over them)."""
        need = self.busy_fraction * HOUR_S
        days: dict[int, tuple[int, dict[str, float]]] = {}
        for hour, busy in sorted(self.hour_busy.items()):
            if (hour + 1) * HOUR_S > span_s:
                break  # a partial last hour
            if all(busy.get(team, 0.0) >= need for team in self.teams):
                day = int(hour * HOUR_S // DAY_S)
                count, usage = days.get(day, (0, {}))
                for team, core_s in self.hour_usage[hour].items():
                    usage[team] = usage.get(team, 0.0) + core_s
                days[day] = (count + 1, usage)
        return [
            (day, count, jain([usage.get(t, 0.0) / self.entitled[t] for t in self.teams]))
            for day, (count, usage) in sorted(days.items())
        ]
