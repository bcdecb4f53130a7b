"""A compute's queue read once for every waiting job of it: positions, reasons' facts and estimated
starts, kept per process for ``REFRESH_S`` so ``job show`` and a ``job list`` page cost a lookup.

A snapshot reads the queue's head in the scheduler's order (``dispatch.queue_in_order``, at most
``QUEUE_READ`` jobs: a deeper job is "10,000+" with no estimate), the running jobs and their
expected ends (the compute's history of completed jobs of the same node count, capped by each
job's ``limits.timeout``: ``wait_estimate.expected_remaining``), the compute's nodes (their
boot times, for the nodes a job waits on; launches the provider failed), the lock/quota limits
the autoscaler reads and its record that the location's capacity binds (``NoCapacity``), and,
where teams share a cluster's pool (``fair_config``: never a single-node compute, as the
scheduler applies no fair share there), each team's usage against its share.
``domain.jobs.queue_places`` turns that into every job's place and start in one pass. Built at
most once per compute per ``REFRESH_S`` per process (a lock per compute: concurrent requests wait
for one build rather than each building), so 100,000 queued jobs cost one read of the head every
few seconds, not one estimate per request.
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

from cloudlet.domain.compute import autoscale, compute_types
from cloudlet.domain.compute.compute_spec import cluster_scaling
from cloudlet.domain.compute.nodes import HOLDING, SERVING, NodeState
from cloudlet.domain.compute.quota import Tier
from cloudlet.domain.jobs import fair_share
from cloudlet.domain.jobs.job_status import WORKING, JobStatus
from cloudlet.domain.jobs.job_wait import ClusterFacts, InstanceFacts
from cloudlet.domain.jobs.queue_places import (
    Boot,
    Pace,
    Place,
    Queued,
    Standing,
    boot_estimate,
    places,
    standings,
)
from cloudlet.domain.jobs.queue_settings import JobTier
from cloudlet.domain.jobs.wait_estimate import (
    ARRIVAL_WINDOW_S,
    RunningEnd,
    arrival_load,
    expected_remaining,
)
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.compute.scaling_limits import UNBOUNDED, scaling_limits
from cloudlet.services.jobs import dispatch, fair_config, fair_usage
from cloudlet.store.schema import Compute, Job, Location, Node

REFRESH_S = 4.0  # a snapshot older than this is read again: what a waiting job shows is ≤ ~5 s old
STALE_OK_S = 5.0  # while another request reads the queue again, one this old is still shown
QUEUE_READ = 10_000  # queue rows read; a job deeper than that is "10,000+", with no estimate
HISTORY_ROWS = 500  # completed jobs of the compute its estimates learn from (the newest)
ARRIVAL_ROWS = 5_000  # newest submissions whose rate stretches the estimates (wait_estimate.stretched)
PACE_ROWS = 5_000  # started jobs of the compute whose start times give the recent pace (the newest)
SAME_SIZE_MIN = 5  # fewer completed jobs of a node count than this: learn from all sizes
BOOT_HISTORY = 20  # the compute's newest node starts its boot estimate learns from
FAILED_WINDOW_S = 600.0  # launches that failed longer ago than this (or before a node came up) are past
FAILED_ROWS = 100
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
    boot: Boot | None = None  # a cluster's expected node boot, added where a job waits for one

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
    extra = _job_columns(rows)
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
    arrivals: list[tuple[float, int]] = []
    if single:
        capacity, free = _instance(session, compute, snap)
        unit = _processes
    else:
        capacity, free, arrivals = _cluster(session, compute, snap, running_rows, now)
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
    pace = _pace(started, config, now)
    loads = _arrival_loads(session, compute, config, history, capacity, unit, now)
    snap.places = places(
        snap.queue, capacity, free, running, factors, arrivals=arrivals, pace=pace, loads=loads
    )
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
    session: Session, compute: Compute, snap: Snapshot, running: Sequence[Any], now: float
) -> tuple[float, float, list[tuple[float, int]]]:
    """The cluster's facts for the reasons, and for the estimates its capacity in nodes (what it may
    grow to under its max, lock, quota and what the location can give), the free nodes that are up
    and the nodes not up yet (``arrivals``: a starting one when its boot should end, one still to
    be made after a whole boot)."""
    scaling = cluster_scaling(compute.spec)
    owned = node_service.owned_by_compute(compute.id)
    counted = session.execute(select(Node.state, func.count()).where(owned).group_by(Node.state))
    states: Counter[NodeState] = Counter({NodeState(state): int(count) for state, count in counted})
    limits = scaling_limits(session, compute, Tier(scaling.tier), sum(states[s] for s in HOLDING))
    serving = sum(states[s] for s in SERVING)
    boot, last_up = _boot(session, compute, owned)
    failed = _failed_launches(session, owned, max(now - FAILED_WINDOW_S, last_up))
    capacity_note = _capacity_record(compute)
    snap.boot = boot
    snap.cluster = ClusterFacts(
        max_instances=scaling.max_instances,
        serving_nodes=serving,
        starting_nodes=sum(states[s] for s in _STARTING),
        idle_nodes=states[NodeState.IDLE],
        job_nodes=0,
        lock_reason=limits.blocked_reason,
        quota_nodes=limits.quota_nodes,
        quota_reason=limits.quota_reason,
        capacity_reason=capacity_note[0] if capacity_note else "",
        capacity_nodes=capacity_note[1] if capacity_note else 0,
        failed_launches=len(failed),
        failed_over_s=now - min(at for at, _ in failed) if failed else 0.0,
        launch_error=failed[0][1] if failed else "",
    )
    size = catalogue_service.current(session).get(compute.size or "")
    snap.vcpus_per_node = size.vcpus if size is not None else 1
    grow = (
        0
        if limits.blocked_reason or failed  # launches that keep failing: no node is coming
        else max(0, min(limits.quota_nodes, UNBOUNDED, scaling.max_instances - serving))
    )
    if capacity_note is not None:  # the location gives no more than the autoscaler found room for
        grow = min(grow, capacity_note[1])
    capacity = max(serving, min(scaling.max_instances, serving + grow))
    starting = list(
        session.scalars(select(Node.created_at).where(owned, Node.state.in_([s.value for s in _STARTING])))
    )
    if failed:  # its requested nodes are likely to fail as the last ones did: count only nodes up
        return float(max(0, serving - len(starting))), float(states[NodeState.IDLE]), []
    arrivals = [(max(0.0, boot.seconds - (now - created)), 1) for created in starting]
    if capacity > serving:  # nodes the autoscaler makes for the queue: a whole boot from now
        arrivals.append((boot.seconds, capacity - serving))
    busy = sum(r.instance_count for r in running)
    coming = sum(units for _, units in arrivals)
    return float(capacity), float(max(0, capacity - busy - coming)), arrivals


def _boot(session: Session, compute: Compute, owned: Any) -> tuple[Boot, float]:
    """How long the compute's nodes take to come up (the median of its newest starts: a node's
    request to its agent's registration; none yet: its provider's default), and when one last
    came up (0: never)."""
    found = [
        (float(made), float(up or made))
        for made, up in session.execute(
            select(Node.created_at, Node.registered_at)
            .where(owned, Node.registered_at.is_not(None))
            .order_by(Node.created_at.desc())
            .limit(BOOT_HISTORY)
        )
    ]
    if found:
        last_up = max(up for _, up in found)
        return boot_estimate([max(0.0, up - made) for made, up in found], ""), last_up
    location = session.get(Location, compute.location)
    return boot_estimate([], location.provider if location is not None else ""), 0.0


def _failed_launches(session: Session, owned: Any, since: float) -> list[tuple[float, str]]:
    """The compute's node launches the provider refused after SINCE (when, what it said), newest
    first: a launch that fails (``control.actions.launch_node``) leaves its node
    ``allocation_failed`` with the provider's error."""
    found = session.execute(
        select(Node.created_at, Node.error)
        .where(owned, Node.state == NodeState.ALLOCATION_FAILED.value, Node.created_at > since)
        .order_by(Node.created_at.desc())
        .limit(FAILED_ROWS)
    )
    return [(float(at), str((error or {}).get("message") or "")) for at, error in found]


def _capacity_record(compute: Compute) -> tuple[str, int] | None:
    """The autoscaler's ``NoCapacity`` warning on the compute (``control.scaling``): the location's
    capacity in words and how many more nodes fit; None while the capacity does not bind."""
    for warning in compute.warnings or []:
        if isinstance(warning, dict) and warning.get("code") == autoscale.NO_CAPACITY:
            return str(warning.get("message") or ""), int(warning.get("nodes") or 0)
    return None


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


def _arrival_loads(
    session: Session,
    compute: Compute,
    config: fair_share.FairShareConfig | None,
    history: dict[int | None, list[float]],
    capacity: float,
    unit: Any,
    now: float,
) -> dict[tuple[str, int], float]:
    """Per ``(team, priority)`` (team ``""`` without fair share) the part of the compute's capacity
    its recent submissions ask for (``wait_estimate.arrival_load``): what later arrivals will take
    ahead of a waiting job (``wait_estimate.stretched``). Each job asks for its size's mean run
    (the estimates' history: timeouts are not read). The submissions of the last
    ``ARRIVAL_WINDOW_S``, at most the newest ``ARRIVAL_ROWS`` of them (a range of the list index,
    ``ix_jobs_list_compute``), counted per user, priority and size in the store; where a burst
    fills that many, the window is theirs (the rate since the oldest of them). Spot jobs never go
    ahead, so are left out."""
    newest = (
        select(Job.created_by, Job.priority, Job.instance_count, Job.submitted_at)
        .where(
            Job.workspace_id == compute.workspace_id,
            Job.compute_name == compute.name,
            Job.submitted_at > now - ARRIVAL_WINDOW_S,
            or_(Job.job_tier.is_(None), Job.job_tier != JobTier.SPOT.value),
            Job.reused_from.is_(None),  # a reused pipeline step took no node
        )
        .order_by(Job.submitted_at.desc())
        .limit(ARRIVAL_ROWS)
        .subquery()
    )
    counted = list(
        session.execute(
            select(
                newest.c.created_by,
                newest.c.priority,
                newest.c.instance_count,
                func.count(),
                func.min(newest.c.submitted_at),
            ).group_by(newest.c.created_by, newest.c.priority, newest.c.instance_count)
        )
    )
    window = ARRIVAL_WINDOW_S
    if sum(int(row[3]) for row in counted) >= ARRIVAL_ROWS:
        window = max(1.0, now - min(float(row[4]) for row in counted))
    typical: dict[int, float] = {}
    arrived: list[tuple[float, tuple[str, int], float]] = []
    for user, priority, nodes, count, _ in counted:
        if nodes not in typical:
            typical[nodes] = unit(nodes, {}) * expected_remaining(0.0, _similar(history, nodes))
        team = config.team_of(user) if config is not None else ""
        arrived.append((now, (team, int(priority)), count * typical[nodes]))  # all within the window
    return arrival_load(arrived, now, window, capacity)


def _similar(history: dict[int | None, list[float]], nodes: int) -> list[float]:
    same = history.get(nodes) or []
    return same if len(same) >= SAME_SIZE_MIN else history[None]


def _job_columns(rows: Sequence[Any]) -> dict[int, tuple[str, str | None]]:
    """Each queued job's submitter and tier, from the queue's rows (``queue_in_order`` reads them)."""
    return {row.id: (row.created_by, row.job_tier) for row in rows}


def _standings(
    session: Session,
    compute: Compute,
    config: fair_share.FairShareConfig,
    snap: Snapshot,
    running: Sequence[Any],
    usage: fair_share.Usage | None,
    now: float,
) -> dict[str, Standing]:
    """Each team's usage against its share of the cluster's cores (nodes × vCPUs), as the
    scheduler's round counts them (``fair_queue``): only a cluster has shares (``fair_config``)."""
    per_node = snap.vcpus_per_node
    if usage is None:  # the scheduler's own figure (fair_usage), exactly
        live = [
            fair_usage.Live(r.created_by, float(r.instance_count * per_node), r.started_at)
            for r in running
            if r.started_at is not None
        ]
        usage = fair_usage.usage(
            session, compute.id, compute.workspace_id, compute.name, per_node, live, config, now
        )
    held: dict[str, float] = {}
    for r in running:
        team = config.team_of(r.created_by)
        held[team] = held.get(team, 0.0) + float(r.instance_count * per_node)
    capacity_cores = float((snap.cluster.max_instances if snap.cluster else 0) * per_node)
    queued_users = {(job.team or config.default_team, "") for job in snap.queue}
    found = fair_share.factors(config, usage, queued_users)
    entitled = fair_share.entitlements(config, capacity_cores) if capacity_cores > 0 else {}
    cap = fair_share.caps(config, capacity_cores, held, borrow=True) if capacity_cores > 0 else {}
    return standings(found.team, found.team_usage_share, found.team_share, held, entitled, cap)
