"""Node records: creation with a per-node credential, state changes, who owns them (the query
shapes ``owned_by_compute`` / ``owned_by_job``), and the list-nodes view."""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import BindParameter, ColumnElement, and_, bindparam, case, select
from sqlalchemy.orm import Session, defer

from cloudlet.domain.compute.node_address import node_address
from cloudlet.domain.compute.nodes import (
    FINAL,
    NodeEvent,
    NodeState,
    azure_node_state,
    next_node_state,
)
from cloudlet.domain.compute.sizes import VmSize
from cloudlet.domain.errors import not_found
from cloudlet.domain.resources import COMPUTES, JOBS
from cloudlet.providers.base import NodeRequest
from cloudlet.store.schema import Compute, Job, Location, Node


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# -- ownership: a node belongs to a compute (cluster, instance) or to a job (serverless, local) --
def by_token_hash(session: Session, token_hash: str) -> tuple[str, int] | None:
    """The node (id, workspace id) whose token hashes to TOKEN_HASH."""
    row = session.execute(select(Node.id, Node.workspace_id).where(Node.token_hash == token_hash)).first()
    return None if row is None else (row.id, row.workspace_id)


def owned_by_compute(compute_id: int | BindParameter[Any]) -> ColumnElement[bool]:
    """Nodes of the compute COMPUTE_ID (an id, or a ``bindparam`` in a statement built once)."""
    return and_(Node.owner_type == COMPUTES, Node.owner_id == compute_id)


def owned_by_job(job_id: int | BindParameter[Any]) -> ColumnElement[bool]:
    """Nodes made for the job JOB_ID (an id, or a ``bindparam``)."""
    return and_(Node.owner_type == JOBS, Node.owner_id == job_id)


OWNED_BY_A_JOB: ColumnElement[bool] = Node.owner_type == JOBS
# The owning compute's id as a column (None for a job's node), for statements that select rows.
OWNING_COMPUTE_ID = case((Node.owner_type == COMPUTES, Node.owner_id), else_=None).label("compute_id")


def compute_of(node: Node) -> int | None:
    """The id of the compute NODE belongs to; None if a job owns it."""
    return node.owner_id if node.owner_type == COMPUTES else None


def job_of(node: Node) -> int | None:
    """The id of the job NODE was made for; None if a compute owns it."""
    return node.owner_id if node.owner_type == JOBS else None


@dataclass(frozen=True)
class Owner:
    """A node's owner that is neither a compute nor a job (an online deployment's replicas)."""

    type: str
    id: int
    workspace_id: int


def _provider_kind(session: Session, location: str) -> str:
    """LOCATION's provider kind, read once per session: the identity map holds the row only weakly,
    so a launch pass making 10,000 nodes would otherwise load it (and autoflush) for each."""
    kinds: dict[str, str] = session.info.setdefault("provider_kinds", {})
    if location not in kinds:
        with session.no_autoflush:
            where = session.get(Location, location)
        if where is None:
            raise not_found("location", location)
        kinds[location] = where.provider
    return kinds[location]


def new_node(
    session: Session,
    *,
    owner: Compute | Job | Owner,
    installation_id: str,
    location: str,
    size: VmSize,
    tier: str,
    now: float | None = None,
    provider_kind: str | None = None,
) -> tuple[Node, str]:
    """Record a node the autoscaler wants (state ``requested``) for OWNER, in its workspace; the
    token goes to its agent only. LOCATION's provider makes it: the node records that provider's
    kind (for the record; the control loops find the provider by the node's location)."""
    kind = provider_kind or _provider_kind(session, location)  # given: not a location's (attached VMs)
    token = secrets.token_urlsafe(32)
    created = time.time() if now is None else now
    node = Node(
        id=f"n-{secrets.token_hex(5)}",
        workspace_id=owner.workspace_id,
        owner_type=owner.type
        if isinstance(owner, Owner)
        else COMPUTES
        if isinstance(owner, Compute)
        else JOBS,
        owner_id=owner.id,
        installation_id=installation_id,
        location=location,
        provider=kind,
        provider_ref={},
        size=size.name,
        family=size.family,
        vcpus=size.vcpus,
        memory_gb=size.memory_gb,
        gpus=size.gpus,
        tier=tier,
        state=NodeState.REQUESTED.value,
        state_since=created,
        token_hash=hash_token(token),
        resources={},
        usage={},
        created_at=created,
    )
    session.add(node)
    return node, token


def advance(node: Node, event: NodeEvent, now: float | None = None) -> None:
    for column, value in transition(node.id, node.state, event, now or time.time()).items():
        setattr(node, column, value)


def transition(node_id: str, state: str, event: NodeEvent, now: float) -> dict[str, Any]:
    """The node columns EVENT changes (state and its timestamps): applied to an object by
    ``advance``, or to a row by a plain UPDATE."""
    after = next_node_state(NodeState(state), event, node_id)
    changes: dict[str, Any] = {"state": after.value, "state_since": now}
    if after is NodeState.IDLE:
        changes.update(idle_since=now, current_run=None)
    elif after is NodeState.BUSY:
        changes["idle_since"] = None
    elif after in FINAL:
        changes["ended_at"] = now
    return changes


_LIVE_NODES = (
    select(Node)
    .where(owned_by_compute(bindparam("compute")), Node.state != NodeState.TERMINATED.value)
    .order_by(Node.created_at)
)
# What a reconcile pass reads of a node: not its reports (usage, apps, instance report, resources),
# whose JSON decoding dominated a pass over thousands of nodes. They load on access if needed.
_LIVE_NODES_FOR_PASS = _LIVE_NODES.options(
    defer(Node.usage), defer(Node.apps), defer(Node.report), defer(Node.resources)
)
# What dispatch reads of a node (state, address): not the reports agents write.
REPORTS_DEFERRED = (defer(Node.usage), defer(Node.apps), defer(Node.report), defer(Node.provider_ref))


def runs_jobs_side_by_side(node: Node) -> bool:
    """A compute instance's node (made by an instance operation) runs several jobs at once; a
    cluster's or serverless node runs one at a time (C-series scheduling)."""
    return node.operation_id is not None


def live_nodes(session: Session, compute_id: int, for_pass: bool = False) -> list[Node]:
    query = _LIVE_NODES_FOR_PASS if for_pass else _LIVE_NODES
    return list(session.scalars(query, {"compute": compute_id}))


def render(node: Node) -> dict[str, Any]:
    """Azure's listNodes shape plus cloudlet's own detail."""
    return {
        "nodeId": node.id,
        "privateIpAddress": node_address(node.resources),
        "publicIpAddress": None,
        "port": None,
        "nodeState": azure_node_state(NodeState(node.state)),
        "runId": node.current_run,
        "state": node.state,
        "size": node.size,
        "tier": node.tier,
        "idle_since": node.idle_since,
        "last_heartbeat": node.last_heartbeat,
        "usage": node.usage,
        "error": node.error,
        "status_message": status_message(node),
    }


def status_message(node: Node) -> str | None:
    """What the node's engine says while it keeps the machine pending (Slurm's reason), else None."""
    if NodeState(node.state) not in (NodeState.REQUESTED, NodeState.ALLOCATED, NodeState.STARTING):
        return None
    status = (node.report or {}).get("provider_status")
    if isinstance(status, dict) and status.get("phase") == "pending":
        return str(status.get("message") or "") or None
    return None


def launch_request(
    node: Node, token: str, installation_id: str, server_url: str, env: dict[str, str] | None = None
) -> NodeRequest:
    """What a provider needs to make this recorded node (its agent dials ``server_url``)."""
    return NodeRequest(
        node_id=node.id,
        token=token,
        installation_id=installation_id,
        server_url=server_url,
        size=node.size,
        vcpus=node.vcpus,
        memory_gb=node.memory_gb,
        gpus=node.gpus,
        tier=node.tier,
        env=dict(env or {}),
    )
