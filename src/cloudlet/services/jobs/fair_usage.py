"""A compute's fair-share usage: decayed core-seconds per user (``fair_share.decay_usage``).

Nothing is stored for it: the figures are derived from the jobs' run history (one query: each
attempt's start and end on the compute, its cores = instance_count × the size's vCPUs) and kept
per process, brought up to date on every scheduling round from the jobs running then (cores held
constant since the previous round, as ``decay_usage`` integrates them). Any worker or replica
derives the same figures from the same store, so none needs another's copy. Bounds on a copy:

- it never extrapolates over more than ``STALE_S``: a process that has not looked at the compute
  for longer (another replica drove it meanwhile) rebuilds from the history instead;
- it is rebuilt from the history every ``REBUILD_S`` anyway, which also counts the runs that
  started and ended between two rounds (never seen running by one).

So a copy is at most a few seconds of one round's drift off the history's figure: not enough to
flip the order of two teams back and forth, and preemption is bounded by its guard whatever the
order says (``preemption.Guard``).

Usage is per user; the team is applied at read time (``config.team_of``), so a user moved to
another team takes their history with them, at once, in every process.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import bindparam, case, func, or_, select
from sqlalchemy.orm import Session

from cloudlet.domain.jobs import fair_share as fs
from cloudlet.domain.jobs.run_state import RunState
from cloudlet.store.schema import Job, JobRun

STALE_S = 5.0
REBUILD_S = 60.0
# History older than this many half-lives weighs under 0.1 % of what it weighed: not read.
HISTORY_HALF_LIVES = 10
_NOBODY = ""  # the team slot of the per-user keys kept here (teams are applied at read time)

# Each attempt of each job of the compute that ran within the horizon (or still runs): its user,
# its nodes, when its first run started and its last ended (None while one still runs).
_HISTORY = (
    select(
        Job.created_by,
        Job.instance_count,
        func.min(func.coalesce(JobRun.started_at, JobRun.assigned_at)).label("start"),
        func.max(JobRun.ended_at).label("end"),
        func.sum(case((JobRun.state != RunState.EXITED.value, 1), else_=0)).label("live"),
    )
    .join(Job, Job.id == JobRun.job_id)
    .where(
        Job.workspace_id == bindparam("ws"),
        Job.compute_name == bindparam("compute"),
        JobRun.started_at.is_not(None) | (JobRun.state != RunState.EXITED.value),
        or_(JobRun.ended_at >= bindparam("since"), JobRun.state != RunState.EXITED.value),
    )
    .group_by(JobRun.job_id, JobRun.attempt, Job.created_by, Job.instance_count)
)


@dataclass
class _Copy:
    usage: fs.Usage  # keyed by (_NOBODY, user)
    built_at: float
    half_life_s: float


_copies: dict[int, _Copy] = {}
_lock = threading.Lock()


def usage(
    session: Session,
    compute_id: int,
    workspace_id: int,
    compute_name: str,
    vcpus: int,
    held: Mapping[str, float],
    config: fs.FairShareConfig,
    now: float,
) -> fs.Usage:
    """The compute's usage at NOW, keyed by (team, user) under CONFIG. HELD: cores per user
    running now (what the copy adds since its last round)."""
    half_life = config.half_life_s
    with _lock:
        copy = _copies.get(compute_id)
    fresh = (
        copy is not None
        and copy.half_life_s == half_life
        and 0.0 <= now - copy.usage.at <= STALE_S
        and now - copy.built_at <= REBUILD_S
    )
    if copy is not None and fresh:
        per_user = fs.decay_usage(copy.usage, now, {(_NOBODY, u): c for u, c in held.items()}, half_life)
        copy = _Copy(per_user, copy.built_at, half_life)
    else:
        per_user = from_history(session, workspace_id, compute_name, vcpus, now, half_life)
        copy = _Copy(per_user, now, half_life)
    with _lock:
        _copies[compute_id] = copy
    return fs.Usage(now, {(config.team_of(user), user): value for (_, user), value in per_user.users.items()})


def from_history(
    session: Session, workspace_id: int, compute_name: str, vcpus: int, now: float, half_life_s: float
) -> fs.Usage:
    """Usage at NOW from the runs' history alone (keyed by (``_NOBODY``, user)): each attempt's
    cores over its run time, decayed to NOW exactly (``decay_usage`` over the interval, then over
    the time since it ended)."""
    horizon = HISTORY_HALF_LIVES * half_life_s
    params = {"ws": workspace_id, "compute": compute_name, "since": now - horizon if horizon > 0 else now}
    totals: dict[tuple[str, str], float] = {}
    for row in session.execute(_HISTORY, params):
        if row.start is None:
            continue
        live = bool(row.live)
        cores = float(row.instance_count * vcpus)
        key = (_NOBODY, str(row.created_by))
        if half_life_s <= 0:  # no history: what runs now
            if live:
                totals[key] = totals.get(key, 0.0) + cores
            continue
        end = now if live or row.end is None else min(float(row.end), now)
        start = min(float(row.start), end)
        ran = fs.decay_usage(fs.Usage(start), end, {key: cores}, half_life_s)
        at_now = fs.decay_usage(ran, now, {}, half_life_s)
        for k, value in at_now.users.items():
            totals[k] = totals.get(k, 0.0) + value
    return fs.Usage(now, totals)


def forget(compute_id: int | None = None) -> None:
    """Drop the kept copies (one compute's, or all): the next round rebuilds from the history."""
    with _lock:
        if compute_id is None:
            _copies.clear()
        else:
            _copies.pop(compute_id, None)
