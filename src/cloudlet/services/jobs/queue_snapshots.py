"""A compute's queue read once for every waiting job of it: positions, reasons' facts and estimated
starts, kept per process for ``REFRESH_S`` so ``job show`` and a ``job list`` page cost a lookup.

A snapshot reads the queue's head in the scheduler's order (``dispatch.queue_in_order``, at most
``QUEUE_READ`` jobs: a deeper job is "10,000+" with no estimate), the running jobs and their
expected ends (the compute's history of completed jobs of the same node count, capped by each
job's ``limits.timeout``: ``wait_estimate.expected_remaining``), the compute's nodes and the
lock/quota limits the autoscaler reads, and, where teams share the pool (``fair_config``), each
team's usage against its share. ``domain.jobs.queue_places`` turns that into every job's place and
start in one pass. Built at most once per compute per ``REFRESH_S`` per process (a lock per
compute: concurrent requests wait for one build rather than each building), so 100,000 queued jobs
cost one read of the head every few seconds, not one estimate per request.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from cloudlet.domain.compute import compute_types
from cloudlet.domain.compute.compute_spec import cluster_scaling
from cloudlet.domain.compute.nodes import HOLDING, SERVING, NodeState
from cloudlet.domain.compute.quota import Tier
from cloudlet.domain.jobs import fair_share
from cloudlet.domain.jobs.job_status import WORKING, JobStatus
from cloudlet.domain.jobs.job_wait import ClusterFacts, InstanceFacts
from cloudlet.domain.jobs.queue_places import (
    Pace,
    Place,
    Queued,
    Span,
    Standing,
    places,
    standings,
    usage_from_spans,
)
from cloudlet.domain.jobs.queue_settings import JobTier
from cloudlet.domain.jobs.wait_estimate import RunningEnd, expected_remaining
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.compute.scaling_limits import UNBOUNDED, scaling_limits
from cloudlet.services.jobs import dispatch, fair_config, fair_usage
from cloudlet.store.schema import Compute, Job, Node

REFRESH_S = 4.0  # a snapshot older than this is read again: what a waiting job shows is ≤ ~5 s old
STALE_OK_S = 5.0  # while another request reads the queue again, one this old is still shown
QUEUE_READ = 10_000  # queue rows read; a job deeper than that is "10,000+", with no estimate
HISTORY_ROWS = 500  # completed jobs of the compute its estimates learn from (the newest)
PACE_ROWS = 5_000  # started jobs of the compute whose start times give the recent pace (the newest)
SAME_SIZE_MIN = 5  # fewer completed jobs of a node count than this: learn from all sizes
USAGE_HALF_LIVES = 4  # jobs ended longer ago than this many half-lives weigh < 7 %: not read
USAGE_ROWS = 20_000
_STARTING = frozenset({NodeState.REQUESTED, NodeState.ALLOCATED, NodeState.STARTING})
_WORKING = tuple(status.value for status in WORKING)


@dataclass
class Snapshot:
    """One compute's queue as read at ``taken_at`` (epoch seconds)."""

    taken_at: float
    kind: str  # "cluster" or "instance"
    complete: bool  # the whole queue was read (else it goes deeper than QUEUE_READ)
    queue: list[Queued] = field(default_factory=list)
    places: list[Place | None] = field(default_factory=list)
    index: dict[int, int] = field(default_factory=dict)  # job id → its index in ``queue``
    cluster: ClusterFacts | None = None  # job_nodes 0: set per job
    instance: InstanceFacts | None = None  # job_vcpus 0: set per job
    vcpus_per_node: int = 1
    standings: dict[str, Standing] = field(default_factory=dict)

    tail: tuple[int, int, int] = (0, 0, 0)  # jobs, cores and nodes of the whole part read

    def entry(self, job_id: int) -> tuple[Queued, Place | None] | None:
        at = self.index.get(job_id)
        return None if at is None else (self.queue[at], self.places[at])

    @property
    def deeper_than(self) -> int | None:
        return None if self.complete else QUEUE_READ


_cache: dict[tuple[int, str], Snapshot] = {}
_locks: dict[tuple[int, str], threading.Lock] = {}
_locks_lock = threading.Lock()


def snapshot(
    session: Session, compute: Compute, want: int | None = None, usage: fair_share.Usage | None = None
) -> Snapshot:
    """COMPUTE's snapshot, read again when older than ``REFRESH_S`` or when job WANT (an id) is
    queued but newer than a snapshot of the whole queue. ``usage``: the teams' decayed usage where
    the caller keeps it (the scheduler's); else it is computed from the compute's job history."""
    key = (compute.workspace_id, compute.name)
    found = _cache.get(key)
    if _fresh(found, want):
        assert found is not None
        return found
    with _locks_lock:
        lock = _locks.setdefault(key, threading.Lock())
    if not lock.acquire(blocking=False):  # another request is reading the queue now
        if _fresh(found, want, STALE_OK_S):
            assert found is not None
            return found  # what it had, still within the 5 s promise: one request pays the read
        lock.acquire()
    try:  # one build per compute at a time; the others take what it built
        found = _cache.get(key)
        if _fresh(found, want):
            assert found is not None
            return found
        built = build(session, compute, usage)
        _cache[key] = built
        return built
    finally:
        lock.release()


def _fresh(found: Snapshot | None, want: int | None, within: float = REFRESH_S) -> bool:
    if found is None:
        return False
    if time.time() - found.taken_at >= within:
        return False
    # A job newer than a snapshot of the whole queue: read it again (at most QUEUE_READ rows).
    return want is None or want in found.index or not found.complete


def forget() -> None:
    """Drop every snapshot (tests, benchmarks)."""
    _cache.clear()


def build(session: Session, compute: Compute, usage: fair_share.Usage | None = None) -> Snapshot:
    now = time.time()
    rows = dispatch.queue_in_order(session, compute.workspace_id, compute.name, QUEUE_READ)
    extra = _job_columns(session, rows)
    running_rows = list(
        session.execute(
            select(Job.instance_count, Job.started_at, Job.spec, Job.created_by).where(
                Job.workspace_id == compute.workspace_id,
                Job.compute_name == compute.name,
                Job.status.in_(_WORKING),
            )
        )
    )
    # The users read here spare for_compute its probe of the queue for a default-team user (whose
    # team gets a share); a user deeper than QUEUE_READ is missed, as its jobs are.
    users = {user for user, _ in extra.values()} | {r.created_by for r in running_rows}
    config = fair_config.for_compute(session, compute, users=users)
    single = compute.type in compute_types.SINGLE_NODE
    started = _started(session, compute)
    history = _history(started)
    snap = Snapshot(now, "instance" if single else "cluster", len(rows) < QUEUE_READ)
    if single:
        capacity, free = _instance(session, compute, snap)
        unit = _processes
    else:
        capacity, free = _cluster(session, compute, snap, running_rows)
        unit = _nodes
    running = [
        RunningEnd(
            unit(r.instance_count, r.spec),
            expected_remaining(
                max(0.0, now - (r.started_at or now)), _similar(history, r.instance_count), _timeout(r.spec)
            ),
        )
        for r in running_rows
    ]
    for row in rows:
        user, tier = extra.get(row.id, ("", None))
        spec = getattr(row, "spec", None) or {}  # the scheduler's rows may come without it one day
        units = unit(row.instance_count, spec)
        snap.queue.append(
            Queued(
                row.id,
                config.team_of(user) if config is not None else None,
                row.priority,
                tier == JobTier.SPOT.value,
                row.instance_count,
                units,
                units if single else row.instance_count * snap.vcpus_per_node,
                expected_remaining(0.0, _similar(history, row.instance_count), _timeout(spec)),
                bool(row.cancel_requested),
            )
        )
    if config is not None:  # before the places: who is ahead by fair share needs the factors
        snap.standings = _standings(session, compute, config, snap, running_rows, usage, now)
    factors = {team: standing.team.factor for team, standing in snap.standings.items()} if config else None
    snap.places = places(snap.queue, capacity, free, running, factors, _pace(started, config, now))
    snap.index = {job.id: i for i, job in enumerate(snap.queue)}
    ready = [job for job in snap.queue if not job.canceled]
    snap.tail = (len(ready), sum(job.cores for job in ready), sum(job.nodes for job in ready))
    return snap


def _instance(session: Session, compute: Compute, snap: Snapshot) -> tuple[float, float]:
    vcpus = dispatch.instance_vcpus(session, compute)
    state = compute.state or "Unknown"
    if vcpus is None:  # no serving node: stopped, or starting though its record may say running
        snap.instance = InstanceFacts("Starting" if state.lower() == "running" else state, 0, 0, 0)
        return 0.0, 0.0
    total, free = vcpus
    snap.instance = InstanceFacts(state, total, free, 0)
    return float(total), float(free)


def _cluster(
    session: Session, compute: Compute, snap: Snapshot, running: Sequence[Any]
) -> tuple[float, float]:
    """The cluster's facts for the reasons, and its capacity in nodes for the estimates: what it
    may grow to under its max, lock and quota; free is that less the nodes running jobs hold."""
    scaling = cluster_scaling(compute.spec)
    counted = session.execute(
        select(Node.state, func.count()).where(node_service.owned_by_compute(compute.id)).group_by(Node.state)
    )
    states: Counter[NodeState] = Counter({NodeState(state): int(count) for state, count in counted})
    limits = scaling_limits(session, compute, Tier(scaling.tier), sum(states[s] for s in HOLDING))
    serving = sum(states[s] for s in SERVING)
    snap.cluster = ClusterFacts(
        max_instances=scaling.max_instances,
        serving_nodes=serving,
        starting_nodes=sum(states[s] for s in _STARTING),
        idle_nodes=states[NodeState.IDLE],
        job_nodes=0,
        lock_reason=limits.blocked_reason,
        quota_nodes=limits.quota_nodes,
        quota_reason=limits.quota_reason,
    )
    size = catalogue_service.current(session).get(compute.size or "")
    snap.vcpus_per_node = size.vcpus if size is not None else 1
    grow = (
        0
        if limits.blocked_reason
        else max(0, min(limits.quota_nodes, UNBOUNDED, scaling.max_instances - serving))
    )
    capacity = max(serving, min(scaling.max_instances, serving + grow))
    busy = sum(r.instance_count for r in running)
    return float(capacity), float(max(0, capacity - busy))


def _nodes(instance_count: int, spec: dict[str, Any]) -> int:
    return instance_count


def _processes(instance_count: int, spec: dict[str, Any]) -> int:
    return dispatch.processes_per_node(spec or {})


def _timeout(spec: dict[str, Any] | None) -> float | None:
    limits = (spec or {}).get("limits") or {}
    value = limits.get("timeout") if isinstance(limits, dict) else None
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def _started(session: Session, compute: Compute) -> list[Any]:
    """The compute's newest started jobs (by submission: the list index's order, so the read stops
    after ``PACE_ROWS``), newest first: the estimates' history and their recent pace in one read."""
    return list(
        session.execute(
            select(Job.created_by, Job.instance_count, Job.status, Job.started_at, Job.ended_at)
            .where(
                Job.workspace_id == compute.workspace_id,
                Job.compute_name == compute.name,
                Job.started_at.is_not(None),
            )
            .order_by(Job.submitted_at.desc())
            .limit(PACE_ROWS)
        )
    )


def _history(started: Sequence[Any]) -> dict[int | None, list[float]]:
    """Run times of the newest ``HISTORY_ROWS`` completed jobs of ``started``, sorted, by node count
    (None: all)."""
    by_size: dict[int | None, list[float]] = {None: []}
    for row in started:
        if row.status != JobStatus.COMPLETED.value or row.ended_at is None:
            continue
        run = max(0.0, float(row.ended_at) - float(row.started_at))
        by_size.setdefault(row.instance_count, []).append(run)
        by_size[None].append(run)
        if len(by_size[None]) >= HISTORY_ROWS:
            break
    for runs in by_size.values():
        runs.sort()
    return by_size


def _pace(started: Sequence[Any], config: fair_share.FairShareConfig | None, now: float) -> Pace:
    """The start times of ``started``, sorted, of the pool and per team (``wait_estimate.recent_pace``).
    A job's ``started_at`` is its first run's: a preempted job's restart is not counted again."""
    pool: list[float] = []
    teams: dict[str, list[float]] = {}
    for row in started:
        pool.append(float(row.started_at))
        if config is not None:
            teams.setdefault(config.team_of(row.created_by), []).append(float(row.started_at))
    pool.sort()
    for starts in teams.values():
        starts.sort()
    return Pace(now, pool, teams)


def _similar(history: dict[int | None, list[float]], nodes: int) -> list[float]:
    same = history.get(nodes) or []
    return same if len(same) >= SAME_SIZE_MIN else history[None]


def _job_columns(session: Session, rows: Sequence[Any]) -> dict[int, tuple[str, str | None]]:
    """Each queued job's submitter and tier: from the queue's rows where they carry them, else read
    by id (``queue_in_order``'s rows may not)."""
    if rows and hasattr(rows[0], "created_by") and hasattr(rows[0], "job_tier"):
        return {row.id: (row.created_by, row.job_tier) for row in rows}
    out: dict[int, tuple[str, str | None]] = {}
    ids = [row.id for row in rows]
    for start in range(0, len(ids), 500):  # bound the IN list
        chunk = ids[start : start + 500]
        query = select(Job.id, Job.created_by, Job.job_tier).where(Job.id.in_(chunk))
        out.update((r.id, (r.created_by, r.job_tier)) for r in session.execute(query))
    return out


def _standings(
    session: Session,
    compute: Compute,
    config: fair_share.FairShareConfig,
    snap: Snapshot,
    running: Sequence[Any],
    usage: fair_share.Usage | None,
    now: float,
) -> dict[str, Standing]:
    """Each team's usage against its share on this compute (its cores: nodes × vCPUs of a cluster)."""
    per_node = snap.vcpus_per_node

    def cores(instance_count: int, spec: dict[str, Any]) -> float:
        return float(
            _processes(instance_count, spec) if snap.kind == "instance" else instance_count * per_node
        )

    if usage is None and snap.kind == "cluster":  # the scheduler's own figure (fair_usage), exactly
        live = [
            fair_usage.Live(r.created_by, cores(r.instance_count, r.spec), r.started_at)
            for r in running
            if r.started_at is not None
        ]
        usage = fair_usage.usage(
            session, compute.id, compute.workspace_id, compute.name, per_node, live, config, now
        )
    if usage is None:  # an instance: from its jobs' run spans
        usage = usage_from_spans(_spans(session, compute, config, now, cores), now, config.half_life_s)
    held: dict[str, float] = {}
    for r in running:
        team = config.team_of(r.created_by)
        held[team] = held.get(team, 0.0) + cores(r.instance_count, r.spec)
    capacity_cores = (
        float(snap.instance.vcpus)
        if snap.instance is not None
        else float((snap.cluster.max_instances if snap.cluster else 0) * per_node)
    )
    queued_users = {(job.team or config.default_team, "") for job in snap.queue}
    found = fair_share.factors(config, usage, queued_users)
    entitled = fair_share.entitlements(config, capacity_cores) if capacity_cores > 0 else {}
    cap = fair_share.caps(config, capacity_cores, held, borrow=True) if capacity_cores > 0 else {}
    return standings(found.team, found.team_usage_share, found.team_share, held, entitled, cap)


def _spans(
    session: Session, compute: Compute, config: fair_share.FairShareConfig, now: float, cores: Any
) -> list[Span]:
    """The run spans of the compute's jobs that still weigh in its teams' usage."""
    since = now - USAGE_HALF_LIVES * config.half_life_s
    found = session.execute(
        select(Job.created_by, Job.instance_count, Job.spec, Job.started_at, Job.ended_at)
        .where(
            Job.workspace_id == compute.workspace_id,
            Job.compute_name == compute.name,
            Job.started_at.is_not(None),
            or_(Job.ended_at.is_(None), Job.ended_at > since),
        )
        .order_by(Job.submitted_at.desc())
        .limit(USAGE_ROWS)
    )
    return [
        Span(
            config.team_of(r.created_by),
            r.created_by,
            cores(r.instance_count, r.spec),
            r.started_at,
            r.ended_at,
        )
        for r in found
    ]
