"""Putting jobs on nodes: scheduling, placing, run specs, handing runs to agents. Taking them off
(exits, requeues, cancels) is ``services/jobs/exits.py``.

A job attempt is one run per process: ``instance_count`` nodes × processes per node. Runs move
``assigned`` (recorded) → ``sent`` (in an agent's poll answer) → ``running`` → ``exited``.
Every function returns the node ids whose agents should be woken once the transaction commits.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row, Select, bindparam, or_, select
from sqlalchemy.orm import Session

from cloudlet.domain.compute import compute_types
from cloudlet.domain.compute.node_address import node_address
from cloudlet.domain.compute.nodes import NodeEvent, NodeState
from cloudlet.domain.jobs.fair_share import FairShareConfig
from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.domain.jobs.run_state import STOP_REQUESTED, RunState
from cloudlet.domain.jobs.scheduling import Placement, QueuedJob, schedule, schedule_in_order
from cloudlet.domain.resources import COMPUTES
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.core import events
from cloudlet.services.core.storage import DataRoot
from cloudlet.services.jobs import exits, fair_queue, job_status, preempting, prepared_specs, run_specs
from cloudlet.services.jobs.placement_writes import PlacementWrites
from cloudlet.store.schema import SPOT_LAST, Compute, Job, JobRun, Node

ASSIGNED, SENT, RUN_RUNNING, EXITED = RunState.ASSIGNED, RunState.SENT, RunState.RUNNING, RunState.EXITED


DELIVERIES = "cloudlet_deliveries"


def deliveries(session: Session) -> list[tuple[str, dict[str, Any]]]:
    """Run specs placed in this session, to hand to agents once it has committed."""
    found: list[tuple[str, dict[str, Any]]] = session.info.pop(DELIVERIES, [])
    return found


def _run_row(job_id: int, node_id: str, spec: dict[str, Any], now: float) -> dict[str, Any]:
    return {
        "id": spec["run"],
        "job_id": job_id,
        "attempt": spec["attempt"],
        "rank": spec["rank"],
        "node_id": node_id,
        "state": SENT,
        "spec": spec,
        "assigned_at": now,
    }


def _gather_runs(
    session: Session, writes: PlacementWrites, job_id: int, made: prepared_specs.Prepared, now: float
) -> None:
    """The attempt's runs, to record as sent with the round's others (ORM objects for a thousand
    runs cost more than their insert; specs made before the lock come encoded), and queued in
    ``session.info`` for delivery after commit."""
    specs = made.specs or []
    rows = [_run_row(job_id, node_id, spec, now) for node_id, spec in specs]
    for row, encoded in zip(rows, made.encoded or [], strict=False):
        row["spec"] = encoded
    writes.runs.extend(rows)
    session.info.setdefault(DELIVERIES, []).extend(specs)


def _preparing_message(attempt: int, nodes: int) -> str:
    return f"attempt {attempt} on {nodes} node(s)"


def _specs_for(
    session: Session,
    job_id: int,
    attempt: run_specs.Attempt,
    targets: list[tuple[str, str]],
    data: DataRoot,
    server_url: str,
    compute: Compute | None,
) -> prepared_specs.Prepared:
    """The attempt's run specs: those built before this transaction for this very placement
    (``prepare_compute``), else built here when the attempt is small or the session may build
    large ones; else ``Deferred`` (nothing written)."""
    node_ids = [node_id for node_id, _ in targets]
    found = prepared_specs.take(session, prepared_specs.key(job_id, attempt.number, node_ids))
    if found is not None:
        return found
    if prepared_specs.is_large(attempt.spec, len(targets)) and not prepared_specs.may_build_large(session):
        raise prepared_specs.Deferred(attempt.name)
    return build(session, attempt, targets, data, server_url, compute)


def build(
    session: Session,
    attempt: run_specs.Attempt,
    targets: list[tuple[str, str]],
    data: DataRoot,
    server_url: str,
    compute: Compute | None,
) -> prepared_specs.Prepared:
    """Build the run specs, or keep why they cannot be made (the job then fails alone)."""
    try:
        made = run_specs.run_specs(session, attempt, targets, data, server_url, compute)
    except Exception as exc:
        return prepared_specs.Prepared(None, exc)
    return prepared_specs.Prepared(made)


def place(
    session: Session,
    job: Any,
    nodes: Sequence[Any],
    data: DataRoot,
    server_url: str,
    compute: Compute | None = None,
    writes: PlacementWrites | None = None,
) -> list[str]:
    """Start the job's next attempt on ``nodes`` (one per instance, in rank order). The run specs
    are recorded as sent and queued in ``session.info`` for delivery after commit.

    JOB is a row of ``_JOB_COLUMNS`` or a ``Job``; NODES are rows of (id, state, resources) or
    ``Node``s. The writes are plain SQL (a thousand-run attempt, and the tiny jobs of a busy
    cluster, cost more as ORM objects); objects the session holds for these rows stay coherent
    with them (``store/rows.py``). A scheduling round passes WRITES to gather its placements'
    writes and execute them together at its end; without it they are written here."""
    now = time.time()
    number = job.attempt + 1
    child = job.parent_job_id is not None
    attempt = run_specs.Attempt(job.name, job.workspace_id, job.compute_name, job.spec, number)
    targets = [(node.id, node_address(node.resources) or "") for node in nodes]
    made = _specs_for(session, job.id, attempt, targets, data, server_url, compute)
    if made.specs is None:  # before anything is written: a job whose runs cannot be made fails alone
        exc = made.error or ValueError("no run specs")
        job_status.update_status(session, job.id, JobStatus.PREPARING, now, {"attempt": number}, child=child)
        message, error = job_status.cannot_start(job.name, exc)
        failed = {"status_message": message, "error": error}
        job_status.update_status(session, job.id, JobStatus.FAILED, now, failed, child=child)
        return []
    gathered = writes if writes is not None else PlacementWrites()
    preparing = {"attempt": number, "status_message": _preparing_message(number, len(nodes))}
    gathered.preparing.append((job.id, now, preparing))
    gathered.child_moved |= child
    if _is_row(job):
        gathered.jobs_were[job.id] = events.JobWas(job.workspace_id, job.name, job.compute_name, job.status)
    _gather_runs(session, gathered, job.id, made, now)
    for node in nodes:
        changes: dict[str, Any] = {"current_run": job.name}
        if node.state == NodeState.IDLE.value:  # an instance's node may already run other jobs
            changes.update(node_service.transition(node.id, node.state, NodeEvent.ASSIGN, now))
            was = _node_was(node, compute)
            if was is not None:
                gathered.nodes_were[node.id] = was
        gathered.nodes.append((node.id, changes))
    if writes is None:
        gathered.write(session)
    return [node.id for node in nodes]


def _is_row(read: Any) -> bool:
    """READ is a row this transaction selected (``_JOB_COLUMNS``, ``_IDLE_NODES``), not an ORM
    object (whose attributes may hold changes not yet written)."""
    return isinstance(read, Row)


def _node_was(node: Any, compute: Compute | None) -> events.NodeWas | None:
    """A cluster's idle node row as read by this round, for its event; None when not known here."""
    if not _is_row(node) or compute is None:
        return None
    if node.owner_type != COMPUTES or node.owner_id != compute.id:
        return None
    return events.NodeWas(node.workspace_id, compute.name, node.state, node.owner_type, node.owner_id)


def cancel_queued(session: Session, job: Any) -> None:
    """A queued job whose cancel was requested ends before it is placed. JOB: a row with ``id``
    and ``parent_job_id``, or a ``Job``."""
    job_status.update_status(
        session, job.id, JobStatus.CANCELED, time.time(), child=job.parent_job_id is not None
    )


SCHEDULE_WINDOW = 256  # queued jobs looked at per scheduling round (priority order)
# Built once: these run on every submission and every run exit.
# What placing needs of a cluster's idle nodes, as rows (read without the write lock, and
# without locking rows, to prepare large attempts).
_IDLE_NODES_TO_PREPARE = (
    select(Node.id, Node.state, Node.resources, Node.workspace_id, Node.owner_type, Node.owner_id)
    .where(node_service.owned_by_compute(bindparam("compute")), Node.state == NodeState.IDLE.value)
    .order_by(Node.created_at)
)
_IDLE_NODES = _IDLE_NODES_TO_PREPARE.with_for_update()
_JOB_COLUMNS = (
    Job.id,
    Job.name,
    Job.workspace_id,
    Job.compute_name,
    Job.status,  # the placement's event says where it came from
    Job.spec,
    Job.attempt,
    Job.parent_job_id,
)
_INSTANCE_NODE = select(Node).where(
    node_service.owned_by_compute(bindparam("compute")),
    Node.state.in_([NodeState.IDLE.value, NodeState.BUSY.value]),
)
# An instance looks this far down its queue for jobs that fit beside the running ones.
INSTANCE_WINDOW = 64
# The scheduler's queue order without fair share (spot tier last, priority high first, then FIFO):
# every reading of such a compute's queue (placing, and a waiting job's position in
# ``services.jobs.job_wait``) orders by this one expression, which ``ix_jobs_queue_order`` serves.
# A compute whose pool has team shares is ordered by ``fair_queue`` instead.
QUEUE_ORDER = (SPOT_LAST, Job.priority.desc(), Job.submitted_at)
_QUEUED_JOBS = (
    select(*_JOB_COLUMNS, Job.cancel_requested)
    .where(
        Job.workspace_id == bindparam("ws"),
        Job.compute_name == bindparam("compute"),
        Job.status == job_status.QUEUED,
    )
    .order_by(*QUEUE_ORDER)
    .limit(INSTANCE_WINDOW)
)
_QUEUE_HEAD = (
    select(
        Job.id,
        Job.name,
        Job.instance_count,
        Job.priority,
        Job.submitted_at,
        Job.cancel_requested,
        Job.parent_job_id,
        Job.job_tier,
    )
    .where(
        Job.workspace_id == bindparam("ws"),
        Job.compute_name == bindparam("compute"),
        Job.status == job_status.QUEUED,
    )
    .order_by(*QUEUE_ORDER)
    .limit(bindparam("window"))
)
SHORT_WINDOW = 16  # looked at first: enough when it fills every idle node
# With the submitter and the tier: a waiting job's team and spot reason (queue_snapshots) read them
# with the order, not by id afterwards (20 more queries for 10,000 rows).
_QUEUE_COLUMNS = (
    Job.id,
    Job.name,
    Job.instance_count,
    Job.priority,
    Job.spec,
    Job.cancel_requested,
    Job.created_by,
    Job.job_tier,
)
_QUEUE = (
    select(*_QUEUE_COLUMNS)
    .where(
        Job.workspace_id == bindparam("ws"),
        Job.compute_name == bindparam("compute"),
        Job.status == job_status.QUEUED,
    )
    .order_by(*QUEUE_ORDER)
    .limit(bindparam("limit"))
)


_COMPUTE = select(Compute).where(
    Compute.workspace_id == bindparam("ws"), Compute.name == bindparam("compute")
)
_QUEUE_ROWS = select(*_QUEUE_COLUMNS).where(
    Job.id.in_(bindparam("jobs", expanding=True)), Job.status == job_status.QUEUED
)


def queue_in_order(session: Session, workspace_id: int, compute_name: str, limit: int) -> list[Any]:
    """The first LIMIT queued jobs of a compute in the order the scheduler takes them (rows: id,
    name, instance_count, priority, spec, cancel_requested, created_by, job_tier): the fair order
    where the compute's pool has team shares (ready jobs in that order, then those whose cancel
    was asked)."""
    params = {"ws": workspace_id, "compute": compute_name, "limit": limit}
    compute = session.scalar(_COMPUTE, params)
    config = fair_queue.config_for(session, compute) if compute is not None else None
    if compute is None or config is None:
        return list(session.execute(_QUEUE, params).all())
    ids = fair_queue.queue_ids(session, compute, config, limit)
    found = _job_rows(session, _QUEUE_ROWS, ids)  # still queued (the order may be a second old)
    return [found[i] for i in ids if i in found]


def schedule_compute(
    session: Session, compute: Compute, data: DataRoot, server_url: str, *, full: bool = False
) -> list[str]:
    """Place the compute's queued jobs on its idle nodes now (priority, FIFO, backfill,
    all-or-nothing). Called when a job arrives, when a node frees up, and by the reconciler, so a
    job starts the moment a node can take it rather than at the next reconcile pass. FULL (the
    reconciler's pass): a pool with team shares decides its preemptions even with no idle node;
    a submission's or an exit's round leaves that to the pass (one interval later), so a busy
    shared pool's submissions do not each pay for a decision over its whole queue."""
    if compute.type in compute_types.SINGLE_NODE:  # one node, jobs side by side
        return _schedule_instance(session, compute, data, server_url)
    config = fair_queue.config_for(session, compute)
    if config is not None:
        return _schedule_fair(session, compute, config, data, server_url, full)
    idle: list[Any] = list(session.execute(_IDLE_NODES, {"compute": compute.id}))
    if not idle:
        return []
    # Greedy placement in queue order stops once every idle node is taken, so a short window
    # that fills them all places exactly what the full window would; look deeper (backfill)
    # only when nodes stay free.
    wake = _schedule_window(session, compute, idle, SHORT_WINDOW, data, server_url)
    if wake is None:
        wake = _schedule_window(session, compute, idle, SCHEDULE_WINDOW, data, server_url) or []
    return wake


def _schedule_window(
    session: Session, compute: Compute, idle: list[Any], window: int, data: DataRoot, server_url: str
) -> list[str] | None:
    """Place jobs from the first ``window`` queued ones; None when nodes stay free and the queue
    holds more than the window (the caller looks deeper)."""
    # Plain columns, not Job objects: a round that places one job must not decode the JSON
    # specs of the whole window (this runs on every submission and every run exit).
    queued = session.execute(
        _QUEUE_HEAD, {"ws": compute.workspace_id, "compute": compute.name, "window": window}
    ).all()
    ready = [row for row in queued if not row.cancel_requested]
    views = [_view(r) for r in ready]
    placements = schedule(views, [n.id for n in idle])
    nodes_left = len(idle) - sum(len(p.nodes) for p in placements)
    if nodes_left and len(queued) == window < SCHEDULE_WINDOW:
        return None  # the queue goes deeper than this window: look further for jobs that fit
    for row in queued:
        if row.cancel_requested:
            cancel_queued(session, row)
    return _place_all(session, compute, ready, idle, placements, data, server_url)


def _view(row: Any) -> QueuedJob:
    spot = row.job_tier == fair_queue.SPOT
    return QueuedJob(row.name, row.instance_count, row.priority, row.submitted_at, spot)


def _place_all(
    session: Session,
    compute: Compute,
    ready: Sequence[Any],
    idle: Sequence[Any],
    placements: Sequence[Placement],
    data: DataRoot,
    server_url: str,
) -> list[str]:
    """Carry out a round's PLACEMENTS of READY rows on IDLE nodes, written together."""
    ids = {r.name: r.id for r in ready}
    by_id = {n.id: n for n in idle}
    jobs = _jobs_to_place(session, [ids[p.job] for p in placements])
    wake: list[str] = []
    writes = PlacementWrites()  # the round's placements are written together, after the loop
    for placement in placements:
        nodes = [by_id[i] for i in placement.nodes]
        try:
            wake += place(session, jobs[ids[placement.job]], nodes, data, server_url, compute, writes)
        except prepared_specs.Deferred:  # the rest waits behind it, in priority order
            prepared_specs.want(session, compute.id)
            break
    writes.write(session)
    return wake


HELD_BACK = "cloudlet_cap_held_nodes"


def held_back_nodes(session: Session, compute_id: int) -> int:
    """Nodes of the queued jobs this transaction's round of the compute held back at their team's
    cap: the autoscaler does not make nodes for them (``control/clusters.py``)."""
    found: dict[int, int] = session.info.get(HELD_BACK, {})
    return found.get(compute_id, 0)


def _schedule_fair(
    session: Session, compute: Compute, config: FairShareConfig, data: DataRoot, server_url: str, full: bool
) -> list[str]:
    """A round of a compute whose pool has team shares (``fair_queue``): preempt what the decision
    says (checkpoint and requeue), then place the admitted jobs, in fair order, on the idle nodes
    (all-or-nothing, backfill). The reconciler's pass (FULL) runs it even with no idle node: that is
    when preemption is needed."""
    now = time.time()
    idle: list[Any] = list(session.execute(_IDLE_NODES, {"compute": compute.id}))
    if not idle and not full:
        return []
    decided = fair_queue.decide_round(session, compute, config, now)
    session.info.setdefault(HELD_BACK, {})[compute.id] = decided.held_back_nodes
    wake = preempting.stop(session, compute, decided.victims, now)
    for row in decided.canceled:
        cancel_queued(session, row)
    if not idle or not decided.admitted:
        return wake
    placements = schedule_in_order([_view(r) for r in decided.admitted], [n.id for n in idle])
    return wake + _place_all(session, compute, decided.admitted, idle, placements, data, server_url)


def prepare_compute(
    reads: Session, compute_id: int, data: DataRoot, server_url: str
) -> dict[prepared_specs.Key, prepared_specs.Prepared]:
    """Outside any write transaction (READS takes no write lock): the run specs of the large
    attempts the next scheduling round of the compute would place, by the same rule over the same
    queue and idle nodes. The round re-checks under the lock (the key names the job's attempt and
    its nodes: a moved state does not match) and writes them (``services/jobs/prepared_specs.py``).
    A busy cluster (no idle node) costs one query."""
    idle = list(reads.execute(_IDLE_NODES_TO_PREPARE, {"compute": compute_id}))
    if not idle:
        return {}
    compute = reads.get(Compute, compute_id)
    if compute is None or compute.type in compute_types.SINGLE_NODE:
        return {}  # one node: its attempts are bounded by its vCPUs, built in the round
    config = fair_queue.config_for(reads, compute)
    if config is not None:  # the fair round's order and admission (reads only)
        ready = fair_queue.decide_round(reads, compute, config).admitted
        placements = schedule_in_order([_view(r) for r in ready], [n.id for n in idle])
    else:
        params = {"ws": compute.workspace_id, "compute": compute.name, "window": SCHEDULE_WINDOW}
        ready = [row for row in reads.execute(_QUEUE_HEAD, params) if not row.cancel_requested]
        placements = schedule([_view(r) for r in ready], [n.id for n in idle])
    ids = {r.name: r.id for r in ready}
    by_id = {n.id: n for n in idle}
    prepared: dict[prepared_specs.Key, prepared_specs.Prepared] = {}
    maybe = _maybe_large(reads, [ids[p.job] for p in placements])
    for placement in placements:
        job = maybe.get(ids[placement.job])
        if job is None or not prepared_specs.is_large(job.spec, len(placement.nodes)):
            continue
        attempt = run_specs.Attempt(job.name, job.workspace_id, job.compute_name, job.spec, job.attempt + 1)
        targets = [(i, node_address(by_id[i].resources) or "") for i in placement.nodes]
        made = build(reads, attempt, targets, data, server_url, compute).encode()
        prepared[prepared_specs.key(job.id, attempt.number, placement.nodes)] = made
    return prepared


_JOBS_TO_PLACE = select(*_JOB_COLUMNS).where(Job.id.in_(bindparam("jobs", expanding=True)))
_MAYBE_LARGE = _JOBS_TO_PLACE.where(
    or_(
        Job.spec["distribution"].as_string().is_not(None),  # several processes a node, or TF tasks
        Job.instance_count > prepared_specs.LARGE_PROCESSES,
    )
)


def _maybe_large(reads: Session, job_ids: list[int]) -> dict[int, Any]:
    """The jobs among JOB_IDS that may start more than ``LARGE_PROCESSES`` processes (a
    distribution, or that many nodes), as ``_JOB_COLUMNS`` rows: the others' specs stay unread."""
    return _job_rows(reads, _MAYBE_LARGE, job_ids)


def _jobs_to_place(session: Session, job_ids: list[int]) -> dict[int, Any]:
    """The placed jobs of a round as ``_JOB_COLUMNS`` rows, in one query."""
    return _job_rows(session, _JOBS_TO_PLACE, job_ids) if job_ids else {}


def _job_rows(session: Session, query: Select[Any], job_ids: list[int]) -> dict[int, Any]:
    found: dict[int, Any] = {}
    for start in range(0, len(job_ids), 500):  # bound the IN list
        chunk = job_ids[start : start + 500]
        found.update((row.id, row) for row in session.execute(query, {"jobs": chunk}))
    return found


def _schedule_instance(session: Session, compute: Compute, data: DataRoot, server_url: str) -> list[str]:
    """A compute instance runs jobs side by side on its one node (I11): each job takes a vCPU per
    process (``process_count_per_instance``, at most the node's vCPUs); the rest wait, in queue
    order, with smaller jobs filling what the head cannot use."""
    node = session.scalar(_INSTANCE_NODE, {"compute": compute.id})
    if node is None:
        return []
    free = node.vcpus - len(list(session.scalars(exits.ACTIVE_RUNS_ON_NODE, {"node": node.id})))
    wake: list[str] = []
    queued = session.execute(_QUEUED_JOBS, {"ws": compute.workspace_id, "compute": compute.name}).all()
    for job in queued:
        if free <= 0:
            break
        if job.cancel_requested:
            cancel_queued(session, job)
            continue
        need = min(processes_per_node(job.spec), node.vcpus)
        if need <= free:
            try:
                wake += place(session, job, [node], data, server_url, compute)
            except prepared_specs.Deferred:
                prepared_specs.want(session, compute.id)
                break
            free -= need
    return wake


def instance_vcpus(session: Session, compute: Compute) -> tuple[int, int] | None:
    """An instance's vCPUs and how many its running jobs leave free, as ``_schedule_instance``
    counts them; None when it has no serving node (stopped, starting)."""
    node = session.scalar(_INSTANCE_NODE, {"compute": compute.id})
    if node is None:
        return None
    return node.vcpus, node.vcpus - len(list(session.scalars(exits.ACTIVE_RUNS_ON_NODE, {"node": node.id})))


def processes_per_node(doc: dict[str, Any]) -> int:
    distribution = doc.get("distribution") or {}
    return max(1, int(distribution.get("process_count_per_instance") or 1))


def schedule_freed(
    session: Session,
    node_ids: list[str],
    data: DataRoot,
    server_url: str,
    fed: dict[int, Compute] | None = None,
    also: set[int] | None = None,
) -> list[str]:
    """After runs ended: the freed nodes' clusters take their next queued jobs at once; so do the
    computes in FED (that just got jobs) and ALSO (ids), each scheduled once."""
    fed = fed or {}
    computes = set(fed) | (also or set())
    for node_id in set(node_ids):
        node = session.get(Node, node_id, options=node_service.REPORTS_DEFERRED)
        # A busy node here is an instance's that still runs jobs but has vCPUs free again.
        free = (NodeState.IDLE.value, NodeState.BUSY.value)
        compute_id = node_service.compute_of(node) if node is not None else None
        if node is not None and compute_id is not None and node.state in free:
            computes.add(compute_id)
    wake: list[str] = []
    for compute_id in computes:
        compute = fed.get(compute_id) or session.get(Compute, compute_id)
        if compute is not None:
            wake += schedule_compute(session, compute, data, server_url)
    return wake


RESEND_AFTER_S = 3.0


def resend_due(run: JobRun, now: float) -> bool:
    """A run sent this long ago that its agent does not report holding was lost on the way (the
    answer carrying it died with a crashed server or a dropped connection)."""
    return now - run.assigned_at > RESEND_AFTER_S


def runs_for_agent(
    session: Session, node: Node, reported: set[str], now: float
) -> tuple[list[dict[str, Any]], list[str]]:
    """Runs to start on this node (marked sent) and runs to cancel. A run sent earlier that the
    agent does not report having (the answer was lost in a crash) is sent again; agents start a
    run id once, so a duplicate is harmless."""
    rows = list(session.scalars(select(JobRun).where(JobRun.node_id == node.id, JobRun.state != EXITED)))
    start = []
    for run in rows:
        lost_in_flight = run.state == SENT and run.id not in reported and resend_due(run, now)
        if run.state == ASSIGNED or lost_in_flight:
            run.state = SENT
            start.append(run.spec)
    cancel = [run.id for run in rows if run.reason in STOP_REQUESTED]
    return start, cancel


def record_running(session: Session, run: JobRun, pid: int | None, started_at: float | None) -> None:
    if run.state in (ASSIGNED, SENT):
        started = started_at or time.time()
        run.state, run.pid, run.started_at = RUN_RUNNING, pid, started
        job = session.get(Job, run.job_id)
        if job is not None and job.status == JobStatus.PREPARING:
            # The job's start is its first run's (set_status keeps a start already stamped).
            job_status.set_status(job, JobStatus.RUNNING, started, message=None)
