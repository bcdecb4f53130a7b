"""One view of a compute's pool under weighted fair share (issue 31): per team its share, entitlement,
cores held and borrowed, decayed usage, fair-share factor and queued jobs, and the pool's
preemptions of the last hour against the guard's cap. Every door shows this one dict: the REST route
``GET {ws}/computes/{name}/fairShare``, ``cloudlet compute show`` and the studio's Fair share tab.

The figures are the scheduler's own: the pool's configuration (``fair_config.for_compute``), the
pure ``domain/jobs/fair_share`` functions (``entitlements``, ``borrowed``, ``factors``) and the
usage as the scheduler reads it (``_usage``). Reads only.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from cloudlet.domain.compute import compute_types
from cloudlet.domain.compute.compute_spec import cluster_scaling
from cloudlet.domain.jobs import fair_share as fs
from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.jobs import fair_config
from cloudlet.store.schema import Compute, Job

HOUR_S = 3600.0
_HELD = (JobStatus.PREPARING.value, JobStatus.RUNNING.value, JobStatus.FINALIZING.value)


def _vcpus(session: Session, compute: Compute) -> int:
    size = catalogue_service.current(session).get(compute.size or "")
    return max(1, int(size.vcpus)) if size is not None else 1


def _capacity(compute: Compute, vcpus: int) -> int:
    nodes = cluster_scaling(compute.spec).max_instances if compute.type == "amlcompute" else 1
    return nodes * vcpus


def _usage(
    session: Session,
    compute: Compute,
    vcpus: int,
    running: list[Any],
    config: fs.FairShareConfig,
    now: float,
) -> fs.Usage:
    """The pool's decayed usage per (team, user), as the scheduler reads it.
    Placeholder until i31-sched's ``fair_usage.usage`` is on main: the running jobs' cores since
    their start, decayed (``decay_usage``); finished runs are not counted."""
    users: dict[tuple[str, str], float] = {}
    for row in running:
        key = (config.team_of(row.created_by), row.created_by)
        since = fs.Usage(float(row.started_at or row.submitted_at))
        ran = fs.decay_usage(since, now, {key: row.instance_count * vcpus}, config.half_life_s)
        users[key] = users.get(key, 0.0) + ran.users.get(key, 0.0)
    return fs.Usage(now, users)


def _preemptions(session: Session, compute: Compute, now: float) -> tuple[int | None, int | None]:
    """The pool's preemptions over the last hour and the guard's cap (None: not known yet).
    Placeholder until i31-sched's ``fair_queue.recent_preemptions`` is on main."""
    return None, None


def has_shares(session: Session, compute: Compute) -> bool:
    """Whether a team has a share of the compute's pool (two small reads: no probe of the queue)."""
    if compute.type in compute_types.SINGLE_NODE:
        return False
    return fair_config.for_compute(session, compute, users=()) is not None


def pool_view(session: Session, compute: Compute, now: float | None = None) -> dict[str, Any] | None:
    """The pool's fair share as every door shows it; None where no team has a share of it (or the
    compute is a single node, which has no pool to share)."""
    if compute.type in compute_types.SINGLE_NODE:
        return None
    config = fair_config.for_compute(session, compute)
    if config is None:
        return None
    now = time.time() if now is None else now
    vcpus = _vcpus(session, compute)
    capacity = _capacity(compute, vcpus)
    where = (Job.workspace_id == compute.workspace_id, Job.compute_name == compute.name)
    running = list(
        session.execute(
            select(Job.name, Job.created_by, Job.instance_count, Job.started_at, Job.submitted_at).where(
                *where, Job.status.in_(_HELD)
            )
        )
    )
    # Queued jobs counted per user in the store (a deep queue is not read row by row).
    queued = {
        str(user): int(count)
        for user, count in session.execute(
            select(Job.created_by, func.count())
            .where(*where, Job.status == JobStatus.QUEUED.value)
            .group_by(Job.created_by)
        )
    }
    usage = _usage(session, compute, vcpus, running, config, now)
    queued_users = {(config.team_of(user), user) for user in queued}
    factors = fs.factors(config, usage, queued_users)
    entitled = fs.entitlements(config, capacity)
    holdings = [
        fs.Holding(
            row.name,
            config.team_of(row.created_by),
            row.instance_count * vcpus,
            row.started_at or row.submitted_at,
        )
        for row in running
    ]
    on_loan = fs.borrowed(holdings, entitled)
    recent, cap = _preemptions(session, compute, now)
    return {
        "compute": compute.name,
        "capacity_cores": capacity,
        "half_life_s": config.half_life_s,
        "teams": _teams(config, entitled, holdings, on_loan, usage, factors, queued),
        "preemptions_last_hour": recent,
        "preemptions_per_hour_cap": cap,
        "at": now,
    }


def _teams(
    config: fs.FairShareConfig,
    entitled: Mapping[str, float],
    holdings: list[fs.Holding],
    on_loan: set[str],
    usage: fs.Usage,
    factors: fs.Factors,
    queued: Mapping[str, int],
) -> list[dict[str, Any]]:
    total_share = sum(team.share for team in config.teams)
    by_team = usage.teams()
    total_usage = sum(by_team.values())
    queued_of: dict[str, int] = {}
    for user, count in queued.items():
        queued_of[config.team_of(user)] = queued_of.get(config.team_of(user), 0) + count
    rows = []
    for team in config.teams:
        mine = [h for h in holdings if h.team == team.name]
        used = by_team.get(team.name, 0.0)
        rows.append(
            {
                "team": team.name,
                "share": team.share,
                "share_percent": round(100.0 * team.share / total_share, 1),
                "borrow_limit": team.borrow_limit,
                "entitlement_cores": round(entitled[team.name], 2),
                "held_cores": sum(h.cores for h in mine),
                "borrowed_cores": sum(h.cores for h in mine if h.name in on_loan),
                "usage_core_hours": round(used / HOUR_S, 6),
                "usage_percent": round(100.0 * used / total_usage, 1) if total_usage > 0 else 0.0,
                "factor": round(factors.team.get(team.name, 1.0), 3),
                "queued_jobs": queued_of.get(team.name, 0),
            }
        )
    return rows


__all__ = ["has_shares", "pool_view"]
