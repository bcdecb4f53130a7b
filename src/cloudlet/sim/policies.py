"""Queue policies on a shared pool, compared on a trace: FIFO, priority, fair share (without and with
borrowing + preemption) and a Kueue-like policy (borrowing and reclaim, no usage decay, no guard).

The pool is a fixed number of GPUs (or cores) shared by teams; the question is who runs when, not
how many machines to hold (``sim.engine`` answers that one). Every decision is the server's pure
code, unchanged: ``domain.jobs.fair_pass.decide`` (the order, the victims and the jobs to start,
through ``fair_share`` and ``preemption``), ``fair_share.decay_usage`` for the usage, and
``domain.jobs.wait_estimate`` (the ETA a job is shown at submission).

A pass runs every ``pass_s`` of simulated time while something changed (an arrival, an end, a
job reaching its minimum run time), as the server's reconcile loop does every few seconds. A
preempted job resumes from its last checkpoint (one every ``checkpoint_s``): only the run since
then is lost.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from cloudlet.domain.jobs import fair_share as fs
from cloudlet.domain.jobs.fair_pass import PassPolicy, RunningJob, decide
from cloudlet.domain.jobs.preemption import Guard
from cloudlet.domain.jobs.wait_estimate import (
    ARRIVAL_WINDOW_S,
    Ahead,
    RunningEnd,
    arrival_load,
    estimate_start,
    expected_remaining,
    paced_start,
    recent_pace,
    stretched,
)
from cloudlet.sim.policy_outcome import PolicyOutcome, Tally


@dataclass(frozen=True)
class Policy:
    name: str
    order: str  # "fifo" (submission only), "priority" (priority, then FIFO), "fair" (fair_order)
    borrow: bool  # teams may go past their share on idle capacity (False: capped at the share)
    preempt: bool  # reclaim borrowed capacity / make room for higher priority
    half_life_s: float | None = None  # None: the run's; 0: no history (usage = cores held now)
    guard: Guard | None = None  # None: the run's guard


DEFAULT_GUARD = Guard()
NO_GUARD = Guard(min_run_s=0.0, max_per_hour=None, max_per_job=None)
POLICIES: dict[str, Policy] = {
    "fifo": Policy("fifo", "fifo", borrow=True, preempt=False),
    "priority": Policy("priority", "priority", borrow=True, preempt=False),
    "fair": Policy("fair", "fair", borrow=False, preempt=False),
    "fair-borrow": Policy("fair-borrow", "fair", borrow=True, preempt=True),
    "kueue": Policy("kueue", "fair", borrow=True, preempt=True, half_life_s=0.0, guard=NO_GUARD),
}


@dataclass(frozen=True)
class PoolJob:
    name: str
    team: str
    user: str
    submit_at: float
    duration_s: float
    cores: int
    priority: int = 2
    spot: bool = False
    timeout_s: float | None = None
    eta: bool = True  # estimate its start at submission (a sample keeps long traces fast)


@dataclass(frozen=True)
class PoolSettings:
    capacity: int
    teams: tuple[fs.TeamShare, ...]
    half_life_s: float = 86400.0
    guard: Guard = DEFAULT_GUARD
    checkpoint_s: float = 900.0
    pass_s: float = 60.0
    busy_fraction: float = 0.9  # an hour counts for Jain when every team wanted its share this long
    measure_until: float | None = None  # utilisation and Jain up to here (default: last arrival)


@dataclass(eq=False)
class _Job:
    spec: PoolJob
    view: fs.FairJob
    fifo_view: fs.FairJob  # the same job with no priority or tier (the FIFO policy's view)
    done_s: float = 0.0  # checkpointed work
    started_at: float | None = None
    first_started_at: float | None = None
    attempt: int = 0
    preemptions: int = 0
    eta_s: float | None = None
    under_share: bool = False  # its team held less than its entitlement when it was submitted


@dataclass
class _State:
    queue: dict[str, _Job] = field(default_factory=dict)
    running: dict[str, _Job] = field(default_factory=dict)
    held: dict[str, int] = field(default_factory=dict)  # team -> cores
    held_users: dict[tuple[str, str], float] = field(default_factory=dict)
    queued: dict[str, int] = field(default_factory=dict)  # team -> cores waiting
    sizes: dict[int, int] = field(default_factory=dict)  # cores -> jobs waiting that need that many
    history: dict[tuple[str, int], list[float]] = field(default_factory=dict)  # sorted durations
    typical: dict[tuple[str, int], tuple[int, float]] = field(default_factory=dict)  # key -> (n, run)
    recent: list[float] = field(default_factory=list)  # preemption times
    fresh: set[str] = field(default_factory=set)  # arrived since the last pass, to estimate
    # (submitted_at, (team, priority), cores × expected duration) of the last ARRIVAL_WINDOW_S
    arrivals: list[tuple[float, tuple[str, int], float]] = field(default_factory=list)
    # start times (sorted: passes run in time order), of the pool and per team: the recent pace
    starts: list[float] = field(default_factory=list)
    team_starts: dict[str, list[float]] = field(default_factory=dict)


def simulate(jobs: Sequence[PoolJob], settings: PoolSettings, policy: Policy) -> PolicyOutcome:
    return _PoolSim(settings, policy).run(jobs)


class _PoolSim:
    def __init__(self, settings: PoolSettings, policy: Policy) -> None:
        self.s = settings
        self.policy = policy
        half_life = settings.half_life_s if policy.half_life_s is None else policy.half_life_s
        self.config = fs.FairShareConfig(settings.teams, half_life_s=half_life)
        self.guard = policy.guard or settings.guard
        self.pass_policy = PassPolicy(policy.order == "fair", policy.borrow, policy.preempt, self.guard)
        self.entitled = fs.entitlements(self.config, settings.capacity)
        self.state = _State()
        self.usage = fs.Usage(0.0)
        self.free = float(settings.capacity)
        self.events: list[tuple[float, int, str, object]] = []
        self._seq = 0
        self.tally = Tally(
            [t.name for t in settings.teams], self.entitled, settings.capacity, settings.busy_fraction
        )

    # -- the loop ----------------------------------------------------------------------------------
    def run(self, jobs: Sequence[PoolJob]) -> PolicyOutcome:
        for spec in jobs:
            if spec.cores > self.s.capacity:
                self.tally.too_big += 1
                continue
            self._push(spec.submit_at, "arrive", spec)
        last_arrival = max((j.submit_at for j in jobs), default=0.0)
        until = self.s.measure_until if self.s.measure_until is not None else last_arrival
        now = 0.0
        next_pass = 0.0
        while self.events:
            when = self.events[0][0]
            step_to = max(when, next_pass)  # events between passes wait for the next pass
            self._account(now, step_to, until)
            now = step_to
            while self.events and self.events[0][0] <= now:
                _, _, kind, payload = heapq.heappop(self.events)
                self._record(kind, payload, now)
            self._pass(now)
            next_pass = now + self.s.pass_s
        return self.tally.outcome(self.policy.name, until)

    def _push(self, when: float, kind: str, payload: object) -> None:
        self._seq += 1
        heapq.heappush(self.events, (when, self._seq, kind, payload))

    def _account(self, start: float, end: float, until: float) -> None:
        if end <= start:
            return
        demand = {
            team: self.state.held.get(team, 0) + self.state.queued.get(team, 0) for team in self.entitled
        }
        self.tally.add_interval(start, min(end, until), self.state.held, demand)
        self.usage = fs.decay_usage(self.usage, end, self.state.held_users, self.config.half_life_s)

    # -- events ------------------------------------------------------------------------------------
    def _record(self, kind: str, payload: object, now: float) -> None:
        if kind == "arrive":
            assert isinstance(payload, PoolJob)
            view = fs.FairJob(
                payload.name,
                payload.team,
                payload.user,
                payload.cores,
                payload.priority,
                payload.submit_at,
                payload.spot,
            )
            fifo = fs.FairJob(payload.name, payload.team, payload.user, payload.cores, 2, payload.submit_at)
            job = _Job(payload, view, fifo)
            job.under_share = self.state.held.get(payload.team, 0) < self.entitled.get(payload.team, 0.0)
            self._enqueue(job)
            if not payload.spot:  # a spot job never goes ahead of another
                work = payload.cores * self._expected(job, 0.0)
                self.state.arrivals.append((payload.submit_at, (payload.team, payload.priority), work))
            if payload.eta:
                self.state.fresh.add(payload.name)
        elif kind == "end":
            assert isinstance(payload, tuple)
            job, attempt = payload
            if job.attempt == attempt and job.started_at is not None:
                self._finish(job, now)
        # "due" (a job reached its minimum run time) only makes the pass run

    def _finish(self, job: _Job, now: float) -> None:
        assert job.started_at is not None
        self._release(job, now)
        key = (job.spec.team, job.spec.cores)
        durations = self.state.history.setdefault(key, [])
        bisect.insort(durations, job.spec.duration_s)
        first = job.first_started_at if job.first_started_at is not None else now
        self.tally.finished(job.spec, first, job.preemptions, job.eta_s, job.under_share)

    def _release(self, job: _Job, now: float) -> None:
        assert job.started_at is not None
        self.tally.ran(job.spec, now - job.started_at)
        del self.state.running[job.spec.name]
        self.free += job.spec.cores
        self.state.held[job.spec.team] -= job.spec.cores
        key = (job.spec.team, job.spec.user)
        self.state.held_users[key] -= job.spec.cores
        job.started_at = None

    # -- the pass ----------------------------------------------------------------------------------
    def _enqueue(self, job: _Job) -> None:
        self.state.queue[job.spec.name] = job
        team, cores = job.spec.team, job.spec.cores
        self.state.queued[team] = self.state.queued.get(team, 0) + cores
        self.state.sizes[cores] = self.state.sizes.get(cores, 0) + 1

    def _dequeue(self, name: str) -> _Job:
        job = self.state.queue.pop(name)
        team, cores = job.spec.team, job.spec.cores
        self.state.queued[team] -= cores
        self.state.sizes[cores] -= 1
        if not self.state.sizes[cores]:
            del self.state.sizes[cores]
        return job

    def _pass(self, now: float) -> None:
        if not self.state.queue:
            return
        if not self.policy.preempt and self.free < min(self.state.sizes) and not self.state.fresh:
            return  # nothing can start and nothing is stopped: the order does not matter now
        fifo = self.policy.order == "fifo"
        queued = [job.fifo_view if fifo else job.view for job in self.state.queue.values()]
        running = [self._running_job(job, now) for job in self.state.running.values()]
        hour_ago = now - 3600.0
        self.state.recent = [t for t in self.state.recent if t > hour_ago]
        decision = decide(
            self.config,
            self.pass_policy,
            self.s.capacity,
            queued,
            running,
            self.usage,
            now,
            self.state.recent,
        )
        for victim in decision.preempt:
            self._stop(self.state.running[victim.victim], now)
        self._estimate(decision.order, now, {job.name for job in decision.start})
        for view in decision.start:
            self._start(self._dequeue(view.name), now)

    def _running_job(self, job: _Job, now: float) -> RunningJob:
        assert job.started_at is not None
        ran = now - job.started_at
        checkpoints = math.floor(ran / self.s.checkpoint_s) if self.s.checkpoint_s > 0 else 0
        last = job.started_at + checkpoints * self.s.checkpoint_s if checkpoints else None
        spec = job.spec
        return RunningJob(
            spec.name, spec.team, spec.cores, spec.priority, spec.spot, job.started_at, last, job.preemptions
        )

    def _start(self, job: _Job, now: float) -> None:
        job.started_at = now
        self.state.starts.append(now)
        self.state.team_starts.setdefault(job.spec.team, []).append(now)
        if job.first_started_at is None:
            job.first_started_at = now
        self.state.running[job.spec.name] = job
        self.free -= job.spec.cores
        self.state.held[job.spec.team] = self.state.held.get(job.spec.team, 0) + job.spec.cores
        key = (job.spec.team, job.spec.user)
        self.state.held_users[key] = self.state.held_users.get(key, 0.0) + job.spec.cores
        self._push(now + job.spec.duration_s - job.done_s, "end", (job, job.attempt))
        if self.policy.preempt and self.guard.min_run_s > 0:
            self._push(now + self.guard.min_run_s, "due", None)

    def _stop(self, job: _Job, now: float) -> None:
        """Checkpoint-and-requeue: the work up to the last checkpoint is kept."""
        assert job.started_at is not None
        ran = now - job.started_at
        kept = math.floor(ran / self.s.checkpoint_s) * self.s.checkpoint_s if self.s.checkpoint_s > 0 else 0.0
        self.tally.lost(job.spec, ran - kept)
        self._release(job, now)
        job.done_s += kept
        job.attempt += 1
        job.preemptions += 1
        self.state.recent.append(now)
        self._enqueue(job)

    # -- the ETA at submission -----------------------------------------------------------------------
    def _estimate(self, ordered: list[fs.FairJob], now: float, starting: set[str]) -> None:
        """The estimate a job is shown on its first pass (it arrived since the last one): 0 for one
        that starts now."""
        fresh, self.state.fresh = self.state.fresh, set()
        for name in fresh & starting:
            self.state.queue[name].eta_s = now - self.state.queue[name].spec.submit_at
        fresh -= starting
        if not fresh:
            return
        running = [self._running_end(j, now) for j in self.state.running.values()]
        since = now - ARRIVAL_WINDOW_S
        self.state.arrivals = [a for a in self.state.arrivals if a[0] > since]
        loads = arrival_load(self.state.arrivals, now, ARRIVAL_WINDOW_S, self.s.capacity)
        order = self.policy.order
        if order == "fifo":
            loads = {}  # nothing submitted later goes ahead (backfill aside)
        # Who goes ahead of a job: higher priorities and, under fair share, teams with a higher factor.
        # With no usage history (Kueue-like) the order follows the cores held this instant: which
        # teams are ahead now says nothing of who will pass the job later (counted: 129 % error).
        fair = order == "fair" and self.config.half_life_s > 0
        team_f = fs.factors(self.config, self.usage).team if fair else {}
        ahead: list[Ahead] = []
        cores_ahead = 0
        team_ahead: dict[str, int] = {}
        for view in ordered:
            job = self.state.queue[view.name]
            if view.name in fresh:
                replay = estimate_start(view.cores, self.s.capacity, self.free, running, ahead)
                if replay is not None:  # later arrivals that go ahead: the server's rule too
                    replay = stretched(replay, view.team, view.priority, loads, team_f, spot=view.spot)
                start = paced_start(
                    replay,
                    cores_ahead + view.cores - self.free,
                    self.s.capacity,
                    recent_pace(self.state.starts, now, len(ahead) + 1),
                    self._class_pace(view.team, team_ahead.get(view.team, 0), len(ahead), now),
                )
                job.eta_s = (now - job.spec.submit_at) + (start if start is not None else math.inf)
                fresh.discard(view.name)
                if not fresh:
                    return
            ahead.append(Ahead(view.cores, self._expected(job, job.done_s)))
            cores_ahead += view.cores
            team_ahead[view.team] = team_ahead.get(view.team, 0) + 1

    def _class_pace(self, team: str, team_ahead: int, ahead: int, now: float) -> float | None:
        """Under fair share a job waits for its own team's queue: the team's recent pace; in one
        queue (FIFO, priority) the pool's."""
        if self.policy.order == "fair":
            return recent_pace(self.state.team_starts.get(team, []), now, team_ahead + 1)
        return recent_pace(self.state.starts, now, ahead + 1)

    def _running_end(self, job: _Job, now: float) -> RunningEnd:
        assert job.started_at is not None
        elapsed = now - job.started_at + job.done_s
        return RunningEnd(job.spec.cores, self._expected(job, elapsed))

    def _expected(self, job: _Job, elapsed: float) -> float:
        key = (job.spec.team, job.spec.cores)
        history = self.state.history.get(key, [])
        if elapsed > 0 or job.spec.timeout_s is not None:
            return expected_remaining(elapsed, history, job.spec.timeout_s)
        # A queued job's expected run is the same for every job of its kind until one more
        # finishes: cached, as the replay asks it for each of thousands of jobs ahead.
        cached = self.state.typical.get(key)
        if cached is None or cached[0] != len(history):
            cached = (len(history), expected_remaining(0.0, history))
            self.state.typical[key] = cached
        return cached[1]
