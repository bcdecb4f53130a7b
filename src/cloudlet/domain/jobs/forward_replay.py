"""Queued jobs' starts from a forward replay of the pool under its own policy, with the arrivals to
come (pure).

``wait_estimate.estimate_start`` replays the queue in the order *of now* and approximates the later
arrivals that go ahead by a scalar stretch. Under fair share the order is not static: as a team's
jobs start its usage grows and its factor falls, and the other teams' later submissions jump in.
``forward_starts`` replays the pool pass by pass under the same rules as the scheduler's pass
(``fair_share.factors``, ``fair_order``'s classes and ranking, ``caps``, ``admit``; preemption is
left out): running jobs end at their expected ends, queued jobs run their expected durations,
usage accrues and decays as the policy's does (``fair_share.decay_usage``), and the submissions
to come are a **persistence forecast**: the last ``window_s`` of actual submissions (known at the
estimate), replayed shifted forward by ``window_s``, ``2·window_s``, … One replay gives the start
of every queued job asked for at once.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from itertools import chain

from cloudlet.domain.jobs import fair_share as fs
from cloudlet.domain.jobs.fair_pass import PassPolicy, RunningJob, decide

FORWARD_WINDOW_S = 24 * 3600.0  # the persistence forecast's window (chosen on Philly days 35–42)
FORWARD_STEP_S = 60.0  # at most one pass per this much replayed time (the scheduler's pass)
FORWARD_HORIZON_S = 14 * 86400.0  # a job not started this far ahead gets no forward estimate


@dataclass(frozen=True, slots=True)
class Holding:
    """A running job: what it holds and when it is expected to end (seconds from now)."""

    job: fs.FairJob
    ends_in_s: float
    started_at: float = 0.0  # for the preemption guard (minimum run) and the victims' cost order
    preemptions: int = 0


@dataclass(frozen=True, slots=True)
class Work:
    """A queued job, or a recent submission of the forecast, with its expected run."""

    job: fs.FairJob
    duration_s: float


def forward_starts(
    config: fs.FairShareConfig | None,
    capacity: float,
    free: float,
    running: Sequence[Holding],
    queue: Sequence[Work],
    usage: fs.Usage,
    now: float,
    recent: Sequence[Work] = (),
    *,
    policy: PassPolicy | None = None,
    preempted: Sequence[float] = (),
    targets: Collection[str] | None = None,
    window_s: float = FORWARD_WINDOW_S,
    step_s: float = FORWARD_STEP_S,
    horizon_s: float = FORWARD_HORIZON_S,
) -> dict[str, float]:
    """Seconds from ``now`` until each queued job starts (``targets``: those asked for, default
    all), replaying the pool forward. ``config``: the pool's teams (None: no fair share, spot last,
    priority, then FIFO); ``policy``: borrowing and preemption (default: borrowing, no
    preemption); with preemption each pass is ``fair_pass.decide`` itself (``preempted``: the
    pool's recent preemption times, for its guard) and a victim goes back to the queue with the
    rest of its expected run. ``usage``: the decayed usage at ``now`` (with the config's
    half-life). ``recent``: the submissions of the last ``window_s`` (``job.submitted_at`` in
    ``(now − window_s, now]``), each submitted again ``window_s`` later, and again, with its
    expected run. A job that has not started within ``horizon_s`` is left out of the answer (as
    one that never fits)."""
    policy = policy or PassPolicy(fair=config is not None, preempt=False)
    borrow = policy.borrow
    fair = config is not None
    half_life = config.half_life_s if config is not None else 0.0
    wanted = set(targets) if targets is not None else {work.job.name for work in queue}
    out: dict[str, float] = {}
    duration = {work.job.name: work.duration_s for work in queue}
    classes = fs.queue_classes([work.job for work in queue if work.job.cores <= capacity], fair)
    sizes: dict[int, int] = {}
    for members in classes.values():
        for job in members:
            sizes[job.cores] = sizes.get(job.cores, 0) + 1
    preempt = policy.preempt and config is not None
    ends: list[tuple[float, int, str]] = []
    live: dict[str, tuple[fs.FairJob, float, RunningJob]] = {}  # name -> (job, end, its view)
    held: dict[str, float] = {}
    held_users: dict[tuple[str, str], float] = {}
    stops = list(preempted)
    live_preempts: dict[str, int] = {run.job.name: run.preemptions for run in running}
    for seq, run in enumerate(running):
        job = run.job
        end = now + run.ends_in_s
        ends.append((end, seq, job.name))
        view = RunningJob(
            job.name, job.team, job.cores, job.priority, job.spot, run.started_at, None, run.preemptions
        )
        live[job.name] = (job, end, view)
        held[job.team] = held.get(job.team, 0.0) + job.cores
        held_users[(job.team, job.user)] = held_users.get((job.team, job.user), 0.0) + job.cores
    heapq.heapify(ends)
    seq = len(ends)
    # The forecast: ``recent`` in submission order, cycle after cycle.
    forecast = sorted(recent, key=lambda w: w.job.submitted_at) if window_s > 0 else []
    forecast = [w for w in forecast if w.job.cores <= capacity and w.job.submitted_at > now - window_s]
    cycle, index = 1, 0
    at = now

    def enqueue(job: fs.FairJob) -> None:
        members = classes.setdefault(fs.class_of(job, fair), [])
        if members and (members[-1].submitted_at, members[-1].name) > (job.submitted_at, job.name):
            members.insert(bisect.bisect(members, (job.submitted_at, job.name), key=_fifo), job)
        else:
            members.append(job)
        sizes[job.cores] = sizes.get(job.cores, 0) + 1

    def release(name: str) -> fs.FairJob:
        nonlocal free
        job, _, _ = live.pop(name)
        free += job.cores
        held[job.team] -= job.cores
        held_users[(job.team, job.user)] -= job.cores
        return job

    while wanted - out.keys():
        # The ends and submissions up to this pass (between passes they wait, as in the scheduler).
        if config is not None:
            usage = fs.decay_usage(usage, at, held_users, half_life)
        while ends and ends[0][0] <= at:
            when, _, name = heapq.heappop(ends)
            if name in live and live[name][1] == when:  # not a preempted run's old end
                release(name)
        while forecast and forecast[index].job.submitted_at + cycle * window_s <= at:
            work = forecast[index]
            was = work.job
            job = fs.FairJob(
                f"{was.name}+{cycle}",
                was.team,
                was.user,
                was.cores,
                was.priority,
                was.submitted_at + cycle * window_s,
                was.spot,
            )
            enqueue(job)
            duration[job.name] = work.duration_s
            index += 1
            if index == len(forecast):
                cycle, index = cycle + 1, 0
        started: Sequence[fs.FairJob] = ()
        if preempt and classes:
            assert config is not None
            queued = list(chain.from_iterable(classes.values()))
            decision = decide(
                config, policy, int(capacity), queued, [v for _, _, v in live.values()], usage, at, stops
            )
            for victim in decision.preempt:
                job, end, view = live[victim.victim]
                release(victim.victim)
                duration[job.name] = max(0.0, end - at)  # the rest of its run (checkpointed)
                stops.append(at)
                enqueue(job)
                live_preempts[job.name] = view.preemptions + 1
            started = decision.start
        elif sizes and free >= min(sizes):
            factors = fs.factors(config, usage) if config is not None else None
            ordered = list(chain.from_iterable(map(classes.__getitem__, fs.rank_classes(classes, factors))))
            room = (
                fs.caps(config, capacity, held, borrow=False) if config is not None and not borrow else None
            )
            started = fs.admit(ordered, free, room, held)
        gone: dict[fs.QueueClass, set[str]] = {}
        for job in started:
            if job.name in wanted and job.name not in out:
                out[job.name] = at - now
            free -= job.cores
            held[job.team] = held.get(job.team, 0.0) + job.cores
            key = (job.team, job.user)
            held_users[key] = held_users.get(key, 0.0) + job.cores
            seq += 1
            end = at + duration.pop(job.name)
            heapq.heappush(ends, (end, seq, job.name))
            view = RunningJob(
                job.name,
                job.team,
                job.cores,
                job.priority,
                job.spot,
                at,
                None,
                live_preempts.get(job.name, 0),
            )
            live[job.name] = (job, end, view)
            sizes[job.cores] -= 1
            if not sizes[job.cores]:
                del sizes[job.cores]
            gone.setdefault(fs.class_of(job, fair), set()).add(job.name)
        for key_, names in gone.items():
            members = classes[key_]
            head = len(names)
            if all(job.name in names for job in members[:head]):
                del members[:head]  # the usual case: a class's first jobs started
            else:
                members[:] = [job for job in members if job.name not in names]
            if not members:
                del classes[key_]
        upcoming = [ends[0][0]] if ends else []
        if forecast:
            upcoming.append(forecast[index].job.submitted_at + cycle * window_s)
        if not upcoming:
            break  # nothing will ever change: the jobs left never start
        at = max(min(upcoming), at + step_s)
        if at - now > horizon_s:
            break
    return out


def _fifo(job: fs.FairJob) -> tuple[float, str]:
    return (job.submitted_at, job.name)


__all__ = ["FORWARD_HORIZON_S", "FORWARD_STEP_S", "FORWARD_WINDOW_S", "Holding", "Work", "forward_starts"]
