"""A fair-share compute's scheduling decision: the queue's order, who is admitted, who is preempted.

Used by the scheduling round (``dispatch.schedule_compute``) of a cluster whose pool has team
shares (``fair_config.for_compute``), by ``dispatch.prepare_compute`` and by
``dispatch.queue_in_order``. The decision itself is ``domain.jobs.fair_pass.decide``, unchanged;
this module reads what it needs and applies the team caps:

- the pool's capacity is ``max_instances`` × the size's vCPUs; a job's cores are its
  ``instance_count`` × them (cluster nodes run one job each);
- the queue is read as each user's first ``USER_WINDOW`` jobs in their own order (spot last,
  priority, FIFO): within one user the fair order is that order, so the pool's first
  ``USER_WINDOW`` jobs in fair order are always among them, however long one user's queue is;
- running jobs whose runs are being stopped (a preemption or a cancel already asked) count as
  gone: their cores are promised to the jobs they were stopped for, and are not preempted again;
- admission walks the fair order within the free cores and each team's cap (its entitlement plus
  its borrow limit, ``fair_share.caps``): a job whose team is at its cap waits, and the
  autoscaler is not asked for nodes for it (``FairRound.held_back_nodes``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session

from cloudlet.domain.compute import compute_types
from cloudlet.domain.compute.compute_spec import cluster_scaling
from cloudlet.domain.jobs import fair_share as fs
from cloudlet.domain.jobs.fair_pass import PassPolicy, RunningJob, decide
from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.domain.jobs.preemption import Guard, Preemption
from cloudlet.domain.jobs.run_state import STOP_REQUESTED, RunState
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.core import settings
from cloudlet.services.jobs import fair_config, fair_usage, job_status
from cloudlet.store.schema import SPOT_LAST, Compute, Job, JobRun, LifecycleEvent

SPOT = "spot"
USER_WINDOW = 256  # each user's queued jobs read per round (the scheduler's window)
CONFIG_FRESH_S = 2.0  # a compute's shares are read from the store at most this often per process
PREEMPTED_EVENT = "Preempted"  # the job event a preemption writes (``to_state``): the hour's count
HOUR_S = 3600.0
WORKING = [s.value for s in (JobStatus.PREPARING, JobStatus.RUNNING, JobStatus.FINALIZING)]

# One user's queue in the fair order (within a user, the fair order is spot, priority, FIFO).
_USER_ORDER = (SPOT_LAST, Job.priority.desc(), Job.submitted_at, Job.name)
_ranked = (
    select(
        Job.id,
        Job.name,
        Job.instance_count,
        Job.priority,
        Job.submitted_at,
        Job.cancel_requested,
        Job.parent_job_id,
        Job.created_by,
        Job.job_tier,
        func.row_number().over(partition_by=Job.created_by, order_by=_USER_ORDER).label("nth"),
    )
    .where(
        Job.workspace_id == bindparam("ws"),
        Job.compute_name == bindparam("compute"),
        Job.status == job_status.QUEUED,
    )
    .subquery()
)
_QUEUED = select(_ranked).where(_ranked.c.nth <= bindparam("window"))
# The live runs of the compute's working jobs' current attempts.
_RUNNING = (
    select(
        Job.id,
        Job.name,
        Job.created_by,
        Job.instance_count,
        Job.priority,
        Job.job_tier,
        Job.preemptions,
        Job.status,
        Job.workspace_id,
        Job.compute_name,
        JobRun.id.label("run_id"),
        JobRun.state.label("run_state"),
        JobRun.reason,
        JobRun.node_id,
        func.coalesce(JobRun.started_at, JobRun.assigned_at).label("run_start"),
    )
    .join(JobRun, (JobRun.job_id == Job.id) & (JobRun.attempt == Job.attempt))
    .where(
        Job.workspace_id == bindparam("ws"),
        Job.compute_name == bindparam("compute"),
        Job.status.in_(WORKING),
        JobRun.state != RunState.EXITED.value,
    )
)
_RECENT = select(LifecycleEvent.at).where(
    LifecycleEvent.at >= bindparam("since"),
    LifecycleEvent.workspace_id == bindparam("ws"),
    LifecycleEvent.compute == bindparam("compute"),
    LifecycleEvent.type == "job",
    LifecycleEvent.to_state == PREEMPTED_EVENT,
)


def guard() -> Guard:
    """The preemption guard in force (environment, read each round: cheap, and a test server sets it):
    ``CLOUDLET_PREEMPT_MIN_RUN_S`` (default 600), ``CLOUDLET_PREEMPT_MAX_PER_HOUR`` per pool
    (default 60), ``CLOUDLET_PREEMPT_MAX_PER_JOB`` (default 3). A bad value is logged and its
    default used (``services/core/settings.py``): a typo must not stop every round."""
    default = Guard()
    return Guard(
        min_run_s=settings.env_number("CLOUDLET_PREEMPT_MIN_RUN_S", default.min_run_s),
        max_per_hour=int(settings.env_number("CLOUDLET_PREEMPT_MAX_PER_HOUR", default.max_per_hour or 60)),
        max_per_job=int(settings.env_number("CLOUDLET_PREEMPT_MAX_PER_JOB", default.max_per_job or 3)),
    )


_configs: dict[int, tuple[float, fs.FairShareConfig | None]] = {}


def config_for(session: Session, compute: Compute) -> fs.FairShareConfig | None:
    """``fair_config.for_compute``, read from the store at most every ``CONFIG_FRESH_S`` per
    compute and process: a round of a compute without shares costs no query for it most times.
    Read without the queue's users (``users=()``: no probe of the queue for a user in no team);
    ``decide_round`` adds the default team when its reads find such a user (``_with_users``)."""
    now = time.monotonic()
    cached = _configs.get(compute.id)
    if cached is not None and now - cached[0] < CONFIG_FRESH_S:
        return cached[1]
    config = fair_config.for_compute(session, compute, users=())
    _configs[compute.id] = (now, config)
    return config


def _with_users(
    session: Session, compute: Compute, config: fs.FairShareConfig, users: set[str]
) -> fs.FairShareConfig:
    """CONFIG as ``fair_config.for_compute`` gives it for these USERS (the round's queued and
    running ones): read again, with the default team, only when one of them is in no team here."""
    if all(user in config.user_teams for user in users):
        return config
    return fair_config.for_compute(session, compute, users=sorted(users)) or config


def forget_configs() -> None:
    """The next round reads every compute's shares again, and every order is decided again
    (tests, and a change made here)."""
    _configs.clear()
    _orders.clear()


@dataclass(frozen=True)
class Victim:
    preemption: Preemption
    job_id: int
    job_status: str
    preemptions: int
    runs: list[Any]  # rows: run_id, run_state, reason, node_id
    message: str  # the job's status_message: why, in words


@dataclass
class FairRound:
    ordered: list[Any]  # queued rows (ready ones) in the fair order
    canceled: list[Any]  # queued rows whose cancel was asked: they end, not placed
    admitted: list[Any]  # rows admitted now (free cores and team caps), in order
    victims: list[Victim]
    held_back_nodes: int  # nodes of the jobs their team's cap holds back (no autoscaler demand)


def vcpus_of(session: Session, compute: Compute) -> int:
    size = catalogue_service.current(session).get(compute.size or "")
    return max(1, int(size.vcpus)) if size is not None else 1


@dataclass
class _Reads:
    """What a round reads of the compute: its queue (each user's window), its running jobs and its
    usage, under the config as it stands for the round's users."""

    config: fs.FairShareConfig
    vcpus: int
    capacity: int
    ready: dict[str, Any]  # queued rows by name, not canceled, in the store's per-user order
    canceled: list[Any]
    queued: list[fs.FairJob]
    running: list[RunningJob]
    runs_of: dict[str, list[Any]]
    usage: fs.Usage


def _read(session: Session, compute: Compute, config: fs.FairShareConfig, window: int, now: float) -> _Reads:
    vcpus = vcpus_of(session, compute)
    capacity = cluster_scaling(compute.spec).max_instances * vcpus
    where = {"ws": compute.workspace_id, "compute": compute.name}
    rows = list(session.execute(_QUEUED, {**where, "window": window}))
    running_rows = list(session.execute(_RUNNING, where))
    users = {str(r.created_by) for r in rows} | {str(r.created_by) for r in running_rows}
    config = _with_users(session, compute, config, users)
    ready = {r.name: r for r in rows if not r.cancel_requested}
    queued = [
        fs.FairJob(
            r.name,
            config.team_of(r.created_by),
            r.created_by,
            r.instance_count * vcpus,
            r.priority,
            r.submitted_at,
            r.job_tier == SPOT,
        )
        for r in ready.values()
    ]
    running, live, runs_of = _running(running_rows, config, vcpus)
    usage = fair_usage.usage(
        session, compute.id, compute.workspace_id, compute.name, vcpus, live, config, now
    )
    canceled = [r for r in rows if r.cancel_requested]
    return _Reads(config, vcpus, capacity, ready, canceled, queued, running, runs_of, usage)


def decide_round(
    session: Session, compute: Compute, config: fs.FairShareConfig, now: float | None = None
) -> FairRound:
    """The compute's fair-share decision now (reads only; the caller carries it out)."""
    now = time.time() if now is None else now
    reads = _read(session, compute, config, USER_WINDOW, now)
    config, capacity, ready, queued = reads.config, reads.capacity, reads.ready, reads.queued
    running, runs_of, canceled, usage = reads.running, reads.runs_of, reads.canceled, reads.usage
    where = {"ws": compute.workspace_id, "compute": compute.name}
    recent = [float(at) for at in session.scalars(_RECENT, {**where, "since": now - HOUR_S})]
    decision = decide(config, PassPolicy(guard=guard()), capacity, queued, running, usage, now, recent)
    stopped = {p.victim for p in decision.preempt}
    held: dict[str, float] = {}
    for job in running:
        if job.name not in stopped:
            held[job.team] = held.get(job.team, 0.0) + job.cores
    free = capacity - sum(held.values())
    room = fs.caps(config, capacity, held, borrow=True)
    admitted = fs.admit(decision.order, free, room, held)
    within_caps = {j.name for j in fs.admit(decision.order, math.inf, room, held)}
    held_back = [j for j in decision.order if j.name not in within_caps]
    entitled = fs.entitlements(config, capacity)
    team_held = {team: held.get(team, 0.0) for team in entitled}
    for job in running:
        if job.name in stopped:
            team_held[job.team] = team_held.get(job.team, 0.0) + job.cores  # before this round's stops
    by_name = {j.name: j for j in running}
    claims = {j.name: j for j in queued}
    victims = [
        Victim(
            p,
            runs_of[p.victim][0].id,
            runs_of[p.victim][0].status,
            int(runs_of[p.victim][0].preemptions or 0),
            runs_of[p.victim],
            _why(p, claims.get(p.for_job), by_name[p.victim], team_held, entitled),
        )
        for p in decision.preempt
        if p.victim in runs_of
    ]
    return FairRound(
        [ready[j.name] for j in decision.order],
        canceled,
        [ready[j.name] for j in admitted],
        victims,
        sum(ready[j.name].instance_count for j in held_back),
    )


def _running(
    rows: list[Any], config: fs.FairShareConfig, vcpus: int
) -> tuple[list[RunningJob], list[fair_usage.Live], dict[str, list[Any]]]:
    """The compute's running jobs as the pass sees them (those being stopped left out: counted as
    gone), the live attempts' usage (all of them: they still run), and each job's live runs."""
    runs_of: dict[str, list[Any]] = {}
    for row in rows:
        runs_of.setdefault(row.name, []).append(row)
    running: list[RunningJob] = []
    live: list[fair_usage.Live] = []
    for name, runs in runs_of.items():
        first = runs[0]
        cores = first.instance_count * vcpus
        started = min((float(r.run_start) for r in runs if r.run_start is not None), default=time.time())
        live.append(fair_usage.Live(str(first.created_by), float(cores), started))
        if any(r.reason in STOP_REQUESTED for r in runs):
            continue
        running.append(
            RunningJob(
                name,
                config.team_of(first.created_by),
                cores,
                first.priority,
                first.job_tier == SPOT,
                started,
                None,  # when it last wrote a checkpoint is not known here: all since its start counts
                int(first.preemptions or 0),
            )
        )
    return running, live, runs_of


def running_now(
    session: Session, compute: Compute, config: fs.FairShareConfig, vcpus: int
) -> tuple[list[RunningJob], list[fair_usage.Live]]:
    """The compute's running jobs and live attempts as a round reads them (the pool view's, so
    that every door shows the round's own figures: ``services/views/fair_share``)."""
    rows = list(session.execute(_RUNNING, {"ws": compute.workspace_id, "compute": compute.name}))
    running, live, _ = _running(rows, config, vcpus)
    return running, live


def _why(
    p: Preemption,
    claim: fs.FairJob | None,
    victim: RunningJob,
    team_held: dict[str, float],
    entitled: dict[str, float],
) -> str:
    """The victim's status message: why, in words (the domain's reason after it)."""
    requeued = "requeued; it resumes from its checkpoint dir"
    if p.reason.value == "reclaim" and claim is not None:
        team = claim.team
        return (
            f"preempted to give team {team} its share: {team} holds {team_held.get(team, 0.0):g} of "
            f"{entitled.get(team, 0.0):g} cores ({requeued}; {p.message})"
        )
    if claim is not None:
        over = f"priority {claim.priority} over {victim.priority}"
        return f"preempted for {claim.name}, {over} ({requeued}; {p.message})"
    return f"preempted ({requeued}; {p.message})"


ORDER_FRESH_S = 1.0  # a compute's fair order as waiting jobs read it: decided at most this often
_orders: dict[int, tuple[float, int, list[int]]] = {}  # compute → (when, window, ids)


def queue_ids(session: Session, compute: Compute, config: fs.FairShareConfig, limit: int) -> list[int]:
    """The ids of the compute's first LIMIT queued jobs in the fair order (ready ones, then those
    whose cancel was asked), as the scheduler takes them: ``decide``'s order (``fair_order`` under
    the teams' factors), over each user's first LIMIT jobs (at least ``USER_WINDOW``), so the
    first LIMIT are exact however deep. Ordered at most every ``ORDER_FRESH_S`` per compute and
    process, so a page of waiting jobs asking their positions costs one read, not one each."""
    now = time.monotonic()
    cached = _orders.get(compute.id)
    if cached is not None and now - cached[0] < ORDER_FRESH_S and cached[1] >= limit:
        return cached[2][:limit]
    window = max(USER_WINDOW, limit)
    reads = _read(session, compute, config, window, time.time())
    ordered = fs.fair_order(reads.queued, fs.factors(reads.config, reads.usage))
    ids = [reads.ready[j.name].id for j in ordered][:window] + [r.id for r in reads.canceled]
    _orders[compute.id] = (now, window, ids)
    return ids[:limit]


def recent_preemptions(session: Session, compute: Compute, now: float | None = None) -> int:
    """Preemptions the scheduler made in the compute's pool over the last hour (its events)."""
    now = time.time() if now is None else now
    params = {"ws": compute.workspace_id, "compute": compute.name, "since": now - HOUR_S}
    return len(list(session.scalars(_RECENT, params)))


def preemption_figure(session: Session, compute: Compute) -> str | None:
    """``preemptions in the last hour: N of M`` for ``compute show`` (None: no shares, no preemption)."""
    if compute.type in compute_types.SINGLE_NODE or config_for(session, compute) is None:
        return None
    cap = guard().max_per_hour
    return f"preemptions in the last hour: {recent_preemptions(session, compute)} of {cap}"
