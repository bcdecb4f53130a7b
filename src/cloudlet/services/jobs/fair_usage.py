"""A compute's fair-share usage: decayed core-seconds per user (``fair_share.decay_usage``'s figure).

Nothing new is stored: the figures are derived from the jobs' runs. Usage at ``now`` is the sum of
each job attempt's cores (``instance_count`` × the size's vCPUs) over its run time, decayed to
``now`` with the half-life, exactly (the closed form ``decay_usage`` integrates). Two parts:

- **finished attempts** (every run exited): a per-process copy, per compute, of their sum at the
  copy's time ``at``. It decays as a whole (``× 2^(−Δ/h)``), so bringing it to ``now`` needs only
  the attempts that ended since: one query over the runs that ended after ``at`` less
  ``LATE_S`` (``ix_job_runs_ended_at``: a few rows, however long the history), attempts counted
  already being remembered by key for that long (an exit recorded late, with its agent's earlier
  end time, is still counted once). Built in full from the history (one query: ``from_history``)
  the first time a process needs the compute;
- **live attempts**: from the round's own read of the running jobs (their start and cores),
  exactly, each round: no query.

So every process's figure is the store's, at every round: no copy drifts or goes stale, whichever
worker or replica runs the round (what thrash would need). Usage is per user; the team is
applied when read (``config.team_of``), so a user moved to another team takes their history along.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sqlalchemy import bindparam, case, func, select
from sqlalchemy.orm import Session, aliased

from cloudlet.domain.jobs import fair_share as fs
from cloudlet.domain.jobs.run_state import RunState
from cloudlet.store.schema import Job, JobRun

# History older than this many half-lives weighs under 0.1 % of what it weighed: not read.
HISTORY_HALF_LIVES = 10
LATE_S = 120.0  # an attempt's end may be recorded this long after its time (an agent's late report)
_EXITED = RunState.EXITED.value

# Every attempt of the compute's jobs that ran within the horizon (or still runs): its user, nodes,
# first start, last end and how many of its runs still live.
_HISTORY = (
    select(
        JobRun.job_id,
        JobRun.attempt,
        Job.created_by,
        Job.instance_count,
        func.min(func.coalesce(JobRun.started_at, JobRun.assigned_at)).label("start"),
        func.max(JobRun.ended_at).label("end"),
        func.sum(case((JobRun.state != _EXITED, 1), else_=0)).label("live"),
    )
    .join(Job, Job.id == JobRun.job_id)
    .where(
        Job.workspace_id == bindparam("ws"),
        Job.compute_name == bindparam("compute"),
        JobRun.started_at.is_not(None) | (JobRun.state != _EXITED),
        (JobRun.ended_at >= bindparam("since")) | (JobRun.state != _EXITED),
    )
    .group_by(JobRun.job_id, JobRun.attempt, Job.created_by, Job.instance_count)
)
_MATE = aliased(JobRun)
# The runs (of any compute) that ended after ``since``: a range of ``ix_job_runs_ended_at``, a few
# rows however long the history.
_ENDED_RUNS = select(JobRun.job_id, JobRun.attempt, JobRun.ended_at).where(
    JobRun.ended_at > bindparam("since")
)
# Of those runs' jobs, the compute's, with each attempt's first start (over all its runs) and
# whether a run of it still lives: found by id.
_ATTEMPTS = (
    select(
        Job.id,
        Job.created_by,
        Job.instance_count,
        _MATE.attempt,
        func.min(_MATE.started_at).label("start"),
        func.sum(case((_MATE.state != _EXITED, 1), else_=0)).label("live"),
    )
    .join(_MATE, _MATE.job_id == Job.id)
    .where(
        Job.id.in_(bindparam("jobs", expanding=True)),
        Job.workspace_id == bindparam("ws"),
        Job.compute_name == bindparam("compute"),
    )
    .group_by(Job.id, Job.created_by, Job.instance_count, _MATE.attempt)
)


@dataclass(frozen=True)
class Live:
    """A live attempt, as the round read it."""

    user: str
    cores: float
    start: float


@dataclass
class _Copy:
    at: float
    half_life_s: float
    finished: dict[str, float]  # per user, decayed to ``at``
    counted: dict[tuple[int, int], float] = field(default_factory=dict)  # attempt → its end


_copies: dict[int, _Copy] = {}
_lock = threading.Lock()


def usage(
    session: Session,
    compute_id: int,
    workspace_id: int,
    compute_name: str,
    vcpus: int,
    live: Iterable[Live],
    config: fs.FairShareConfig,
    now: float,
) -> fs.Usage:
    """The compute's usage at NOW, keyed by (team, user) under CONFIG; LIVE: its live attempts."""
    half_life = config.half_life_s
    live = list(live)
    per_user: dict[str, float] = {}
    if half_life <= 0:  # no history: what runs now
        for one in live:
            per_user[one.user] = per_user.get(one.user, 0.0) + one.cores
    else:
        per_user = dict(_finished(session, compute_id, workspace_id, compute_name, vcpus, now, half_life))
        for one in live:
            per_user[one.user] = per_user.get(one.user, 0.0) + fs.held_usage(
                one.cores, one.start, now, now, half_life
            )
    return fs.Usage(now, {(config.team_of(u), u): v for u, v in per_user.items() if v > 1e-9})


def _finished(
    session: Session, compute_id: int, workspace_id: int, compute_name: str, vcpus: int, now: float, h: float
) -> Mapping[str, float]:
    """The finished attempts' usage per user at NOW: the kept copy brought up to date."""
    with _lock:
        copy = _copies.get(compute_id)
    where = {"ws": workspace_id, "compute": compute_name}
    # A thread's NOW may be a hair before another's copy (both are right): only a real clock jump
    # back reads the history again.
    if copy is None or copy.half_life_s != h or now < copy.at - 1.0:
        copy = _full(session, where, vcpus, now, h)
    else:
        kept = 2.0 ** (-(now - copy.at) / h)
        finished = {user: value * kept for user, value in copy.finished.items()}
        counted = dict(copy.counted)  # those the query below can return again
        for key, end, user, cores, start in _ended_since(session, where, copy.at - LATE_S, vcpus):
            if key in counted:
                continue
            counted[key] = end
            if start is not None:  # never started (canceled before): it held nothing
                finished[user] = finished.get(user, 0.0) + fs.held_usage(cores, start, end, now, h)
        copy = _Copy(now, h, finished, {key: end for key, end in counted.items() if end > now - LATE_S})
    with _lock:
        _copies[compute_id] = copy
    return copy.finished


def _ended_since(
    session: Session, where: dict[str, object], since: float, vcpus: int
) -> list[tuple[tuple[int, int], float, str, float, float | None]]:
    """The compute's attempts that ended after SINCE (no run still live): key, end, user, cores,
    first start. Two reads by index: the runs that ended lately, then their jobs by id."""
    ends: dict[tuple[int, int], float] = {}
    for job_id, attempt, ended_at in session.execute(_ENDED_RUNS, {"since": since}):
        key = (int(job_id), int(attempt))
        ends[key] = max(ends.get(key, 0.0), float(ended_at or 0.0))  # never NULL past the filter
    if not ends:
        return []
    jobs = sorted({job_id for job_id, _ in ends})
    out = []
    for start in range(0, len(jobs), 500):  # bound the IN list
        params = {**where, "jobs": jobs[start : start + 500]}
        for row in session.execute(_ATTEMPTS, params):
            key = (int(row.id), int(row.attempt))
            if key in ends and not row.live:
                first = float(row.start) if row.start is not None else None
                out.append((key, ends[key], str(row.created_by), float(row.instance_count * vcpus), first))
    return out


def _full(session: Session, where: dict[str, object], vcpus: int, now: float, h: float) -> _Copy:
    """The finished attempts' usage from the whole history within the horizon (one query)."""
    finished: dict[str, float] = {}
    counted: dict[tuple[int, int], float] = {}
    for row in session.execute(_HISTORY, {**where, "since": now - HISTORY_HALF_LIVES * h}):
        if row.live or row.start is None or row.end is None:
            continue
        end = float(row.end)
        if end > now - LATE_S:  # the next update's query returns it again: counted already
            counted[(int(row.job_id), int(row.attempt))] = end
        user = str(row.created_by)
        value = fs.held_usage(float(row.instance_count * vcpus), float(row.start), end, now, h)
        finished[user] = finished.get(user, 0.0) + value
    return _Copy(now, h, finished, counted)


def from_history(
    session: Session, workspace_id: int, compute_name: str, vcpus: int, now: float, half_life_s: float
) -> fs.Usage:
    """Usage at NOW from the history alone, finished and live attempts (keyed by ("", user))."""
    where = {"ws": workspace_id, "compute": compute_name}
    users: dict[tuple[str, str], float] = {}
    for row in session.execute(_HISTORY, {**where, "since": now - HISTORY_HALF_LIVES * half_life_s}):
        if row.start is None:
            continue
        end = now if row.live or row.end is None else float(row.end)
        key = ("", str(row.created_by))
        cores = float(row.instance_count * vcpus)
        users[key] = users.get(key, 0.0) + fs.held_usage(cores, float(row.start), end, now, half_life_s)
    return fs.Usage(now, users)


def forget(compute_id: int | None = None) -> None:
    """Drop the kept copies (one compute's, or all): the next round reads the history again."""
    with _lock:
        if compute_id is None:
            _copies.clear()
        else:
            _copies.pop(compute_id, None)
