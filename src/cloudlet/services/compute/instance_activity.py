"""The stored facts about a compute instance that idle shutdown, schedules and ``compute show``
decide on, and the proxy's record of the owner's last request.

``facts()`` reads rows only (the compute, its current node, an operation in progress, running
jobs): no call to the node, so ``compute show`` stays a few local queries. The node's report
(``Node.report``: ``activity``, ``disk``, …) is what its agent last sent.

The proxy notes the time of the owner's last *deliberate* request per instance in this process's
memory (``note_request``): a page load (``Accept: text/html``), a write (anything but GET/HEAD/
OPTIONS) or a WebSocket opened. JupyterLab's background polling (GETs of kernels, sessions,
contents every few seconds) is not activity, or an open browser tab would keep an instance awake
forever. Kernel and terminal activity come from the agent and count on every replica; with several
replicas, a page load seen by a replica that does not run the watch is not counted.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import UTC, datetime

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from cloudlet.domain.compute.instance_schedule import parse_schedules
from cloudlet.domain.compute.instance_watch import InstanceFacts, disk_full_reason, stored_reason
from cloudlet.domain.compute.nodes import NodeState
from cloudlet.domain.resources import COMPUTES
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.compute import operations
from cloudlet.services.jobs import job_status
from cloudlet.store.schema import Compute, Job, Node, Operation

_last_request: dict[str, float] = {}  # instance name → time.time() of the last deliberate request
# The server's other worker processes hear of each noted request (``server._share_wakeups``): the
# idle watch runs in one of them, whichever proxied the request.
_shared: Callable[[str, float], None] | None = None
WORKING_JOB_STATES = job_status.WORKING_VALUES


def note_request(name: str, method: str = "GET", accept: str = "", websocket: bool = False) -> None:
    if websocket or method not in ("GET", "HEAD", "OPTIONS") or "text/html" in accept:
        at = time.time()
        remember(name, at)
        if _shared is not None:
            _shared(name, at)


def remember(name: str, at: float) -> None:
    if len(_last_request) > 100_000:
        _last_request.clear()
    if at > _last_request.get(name, 0.0):
        _last_request[name] = at


def share(send: Callable[[str, float], None]) -> None:
    global _shared
    _shared = send


def last_request(name: str) -> datetime | None:
    at = _last_request.get(name)
    return None if at is None else datetime.fromtimestamp(at, UTC)


def idle_timeout_s(minutes: float | None) -> float | None:
    """``CLOUDLET_IDLE_SECONDS_PER_MINUTE`` (tests, fast idle) turns the configured minutes into
    that many seconds each; unset, minutes are minutes."""
    scale = os.environ.get("CLOUDLET_IDLE_SECONDS_PER_MINUTE")
    if minutes is None or not scale:
        return None
    return float(minutes) * float(scale)


# Built once: compute show renders these for every instance it shows.
_CURRENT_NODE = (
    select(Node)
    .where(
        node_service.owned_by_compute(bindparam("compute")),
        Node.state.in_([NodeState.IDLE.value, NodeState.BUSY.value]),
    )
    .order_by(Node.created_at.desc())
    .limit(1)
)
_OPERATION_IN_PROGRESS = (
    select(Operation.kind)
    .where(operations.on_resource(COMPUTES, bindparam("compute")), Operation.status == operations.IN_PROGRESS)
    .limit(1)
)
_RUNNING_JOBS = (
    select(Job.name)
    .where(
        Job.workspace_id == bindparam("ws"),
        Job.compute_name == bindparam("compute"),
        Job.status.in_(WORKING_JOB_STATES),
    )
    .limit(20)
)


def current_node(session: Session, compute: Compute) -> Node | None:
    """The instance's registered node (idle or busy), the newest if a restart overlaps."""
    return session.scalar(_CURRENT_NODE, {"compute": compute.id})


def facts(session: Session, compute: Compute, now: float, node: Node | None = None) -> InstanceFacts:
    node = node or current_node(session, compute)
    operation = session.scalar(_OPERATION_IN_PROGRESS, {"compute": compute.id})
    spec = compute.spec or {}
    minutes = spec.get("idle_time_before_shutdown_minutes")
    schedules = parse_schedules((spec.get("schedules") or {}).get("compute_start_stop"))
    report = (node.report or {}) if node is not None else {}
    checked = compute.schedule_checked_at
    return InstanceFacts(
        name=compute.name,
        state=compute.state or "Failed",
        now=datetime.fromtimestamp(now, UTC),
        idle_minutes=minutes,
        schedules=schedules,
        started_at=_when(node.registered_at) if node is not None else None,
        report=report,
        running_jobs=_running_jobs(session, compute) if node is not None else (),
        last_http=last_request(compute.name),
        schedule_checked_at=_when(checked),
        unusable_reason=stored_reason(compute.state, compute.errors or []),
        operation=operation,
        quiet_s=now - (node.last_heartbeat or node.registered_at or now) if node is not None else None,
        disk_full=disk_full_reason(report.get("disk")),
        idle_timeout_s=idle_timeout_s(minutes),
    )


def _running_jobs(session: Session, compute: Compute) -> tuple[str, ...]:
    return tuple(session.scalars(_RUNNING_JOBS, {"ws": compute.workspace_id, "compute": compute.name}))


def _when(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)
