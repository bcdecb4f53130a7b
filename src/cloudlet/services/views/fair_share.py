"""One view of a compute's pool under weighted fair share (issue 31): per team its share, entitlement,
cores held and borrowed, decayed usage, fair-share factor and queued jobs, and the pool's
preemptions of the last hour against the guard's cap. Every door shows this one dict: the REST route
``GET {ws}/computes/{name}/fairShare``, ``cloudlet compute show`` and the studio's Fair share tab.

The figures are the scheduler's own: the pool's configuration (``fair_config.for_compute``), its
running jobs and live attempts as a round reads them (``fair_queue.running_now``), its decayed usage
(``fair_usage.usage``), the pure ``domain/jobs/fair_share`` functions (``entitlements``,
``borrowed``, ``factors``) and the hour's preemptions against the guard's cap
(``fair_queue.recent_preemptions``, ``guard``). Reads only.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from cloudlet.domain.compute.compute_spec import cluster_scaling
from cloudlet.domain.jobs import fair_share as fs
from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.services.jobs import fair_config, fair_queue, fair_usage
from cloudlet.store.schema import Compute, Job

HOUR_S = 3600.0


def _preemptions(session: Session, compute: Compute, now: float) -> tuple[int, int | None]:
    """The pool's preemptions over the last hour and the guard's per-hour cap (None: no cap)."""
    return fair_queue.recent_preemptions(session, compute, now), fair_queue.guard().max_per_hour


def has_shares(session: Session, compute: Compute) -> bool:
    """Whether a team has a share of the compute's pool (two small reads: no probe of the queue)."""
    return fair_config.for_compute(session, compute, users=()) is not None


def pool_view(session: Session, compute: Compute, now: float | None = None) -> dict[str, Any] | None:
    """The pool's fair share as every door shows it; None where no team has a share of it (or the
    compute is a single node, which has no pool to share)."""
    config = fair_config.for_compute(session, compute)  # None for a single node (fair_config.shared_pool)
    if config is None:
        return None
    now = time.time() if now is None else now
    vcpus = fair_queue.vcpus_of(session, compute)
    capacity = cluster_scaling(compute.spec).max_instances * vcpus  # as the round counts it
    running, live = fair_queue.running_now(session, compute, config, vcpus)
    # Queued jobs counted per user in the store (a deep queue is not read row by row).
    queued = {
        str(user): int(count)
        for user, count in session.execute(
            select(Job.created_by, func.count())
            .where(
                Job.workspace_id == compute.workspace_id,
                Job.compute_name == compute.name,
                Job.status == JobStatus.QUEUED.value,
            )
            .group_by(Job.created_by)
        )
    }
    # The scheduler's own usage: finished attempts from the runs' history, live ones from their start.
    usage = fair_usage.usage(
        session, compute.id, compute.workspace_id, compute.name, vcpus, live, config, now
    )
    factors = fs.factors(config, usage, {(config.team_of(user), user) for user in queued})
    entitled = fs.entitlements(config, capacity)
    holdings = [fs.Holding(job.name, job.team, job.cores, job.started_at, job.spot) for job in running]
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
