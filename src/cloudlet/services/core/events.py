"""Writing the events feed: every lifecycle change becomes an event in the change's own transaction.

Where states are written:

- through the ORM (a ``Job``, ``Compute``, ``Node``, ``Operation`` or ``OnlineDeployment`` object
  whose state column changes, or that is inserted or deleted): ``before_flush`` below sees the
  attribute's history, so no service has to remember to record;
- in plain SQL on hot paths (``services/jobs/job_status.update_status(es)``, node rows written by
  placements and exits): those call ``jobs_moving`` / ``nodes_moving`` before their UPDATE.

The events are buffered on the session and inserted just before it commits. Sequence numbers must
become visible in order: on PostgreSQL a transaction that took seq 104 could otherwise commit after
one that took 105, and a reader already at 105 would never see 104. So the insert first takes a
transaction-level advisory lock, held until commit: seqs are allocated in commit order. Taking it
last (after every row lock the transaction needs) keeps it from ever waiting inside a lock cycle,
and it is held only for the insert and the commit. SQLite serializes writers already.
A rolled-back transaction (or savepoint) forgets its events.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import event, insert, inspect, select, text
from sqlalchemy.orm import Session, SessionTransaction

from cloudlet.domain.events import EventType
from cloudlet.domain.resources import COMPUTES
from cloudlet.services.core import effects
from cloudlet.store.schema import (
    BatchDeployment,
    BatchEndpoint,
    Compute,
    Job,
    LifecycleEvent,
    Node,
    OnlineDeployment,
    OnlineEndpoint,
    Operation,
)

_KEY = "cloudlet.events"
_MARKS = "cloudlet.events.savepoints"
EVENTS_LOCK_KEY = 0x65766E74  # "evnt": serializes event inserts to commit order (PostgreSQL)
DELETED = "Deleted"
SUCCEEDED = "Succeeded"


def _buffer(session: Session) -> list[dict[str, Any]]:
    found = session.info.get(_KEY)
    if found is None:
        found = session.info[_KEY] = []
    return found


def record(
    session: Session,
    type: EventType,
    workspace_id: int,
    name: str,
    compute: str | None,
    from_state: str | None,
    to_state: str,
    detail: dict[str, Any] | None = None,
    at: float | None = None,
) -> None:
    """Add an event to SESSION's transaction (inserted when it commits, forgotten if it rolls back)."""
    if from_state == to_state:
        return
    _buffer(session).append(
        {
            "at": time.time() if at is None else at,
            "workspace_id": workspace_id,
            "type": type.value,
            "name": name[:255],
            "compute": compute,
            "from_state": from_state,
            "to_state": to_state,
            "detail": detail or None,
        }
    )


# -- plain-SQL writers ---------------------------------------------------------------------------
@dataclass(frozen=True)
class JobWas:
    """A job row as the transaction read it just before moving it in plain SQL: a writer that
    holds this passes it, and the row is not read again for its event."""

    workspace_id: int
    name: str
    compute: str | None
    status: str


@dataclass(frozen=True)
class NodeWas:
    """A node row as the transaction read it just before writing it in plain SQL (``JobWas``'s
    counterpart). COMPUTE: the owning compute's name (None for a job's node)."""

    workspace_id: int
    compute: str | None
    state: str
    owner_type: str
    owner_id: int | None


_JOB_ROWS = select(Job.id, Job.workspace_id, Job.name, Job.compute_name, Job.status)


def jobs_moving(
    session: Session,
    to: str,
    moves: list[tuple[int, float, dict[str, Any]]],
    known: Mapping[int, JobWas] | None = None,
) -> None:
    """Record job rows (id, now, columns) about to move to TO by a guarded UPDATE. KNOWN: rows the
    caller read in this transaction; the others are read here (the statement does not say where
    each came from). Should the UPDATE fail, the transaction rolls back and so do these."""
    known = known or {}
    missing = [job_id for job_id, _, _ in moves if job_id not in known]
    rows: dict[int, JobWas] = {**known}
    if missing:
        for row in session.connection().execute(_JOB_ROWS.where(Job.id.in_(missing))):
            rows[row.id] = JobWas(row.workspace_id, row.name, row.compute_name, row.status)
    for job_id, now, columns in moves:
        was = rows.get(job_id)
        if was is not None:
            record(
                session,
                EventType.JOB,
                was.workspace_id,
                was.name,
                was.compute,
                was.status,
                to,
                _job_detail(columns.get("status_message"), columns.get("error")),
                now,
            )


_NODE_ROWS = select(
    Node.id,
    Node.workspace_id,
    Node.state,
    Node.owner_type,
    Node.owner_id,
    Compute.name.label("compute"),
).outerjoin(Compute, (Node.owner_type == COMPUTES) & (Compute.id == Node.owner_id))


def nodes_moving(
    session: Session,
    changes: list[tuple[object, dict[str, Any]]],
    known: Mapping[object, NodeWas] | None = None,
) -> None:
    """Record node rows (id, columns) about to be written in plain SQL whose state changes. KNOWN:
    rows the caller read in this transaction; the others are read here."""
    moving = {node_id: columns for node_id, columns in changes if "state" in columns}
    if not moving:
        return
    known = known or {}
    rows: dict[object, NodeWas] = {node_id: known[node_id] for node_id in moving if node_id in known}
    missing = [node_id for node_id in moving if node_id not in rows]
    if missing:
        for row in session.connection().execute(_NODE_ROWS.where(Node.id.in_(missing))):
            rows[row.id] = NodeWas(row.workspace_id, row.compute, row.state, row.owner_type, row.owner_id)
    for node_id, columns in moving.items():
        was = rows.get(node_id)
        if was is None:
            continue
        record(
            session,
            EventType.NODE,
            was.workspace_id,
            str(node_id),
            was.compute,
            was.state,
            str(columns["state"]),
            _node_detail(was.owner_type, was.owner_id, None),
            columns.get("state_since"),
        )


def _job_detail(message: Any, error: Any) -> dict[str, Any] | None:
    detail: dict[str, Any] = {}
    if isinstance(error, dict) and error.get("code"):
        detail["error"] = error["code"]
    if isinstance(message, str) and message:
        detail["message"] = message[:300]
    return detail or None


def _node_detail(owner_type: str, owner_id: int | None, error: Any) -> dict[str, Any]:
    detail: dict[str, Any] = {"owner": f"{owner_type}/{owner_id}"}
    if isinstance(error, dict) and error.get("code"):
        detail["error"] = error["code"]
    return detail


# -- ORM writers ---------------------------------------------------------------------------------
def _changed(obj: Any, attribute: str, new: bool, deleted: bool) -> tuple[str | None, str] | None:
    """(from, to) of OBJ's ATTRIBUTE in this flush, or None when it did not move."""
    if new:
        current = getattr(obj, attribute)
        return (None, current) if current is not None else None
    if deleted:
        return (getattr(obj, attribute), DELETED)
    # The history alone: reading the attribute of an expired object would load it.
    history = inspect(obj).attrs[attribute].history
    if not history.added:
        return None
    before = history.deleted[0] if history.deleted else None
    after = history.added[0]
    return (before, after) if before != after and after is not None else None


def _from_object(session: Session, obj: Any, new: bool, deleted: bool) -> None:
    if isinstance(obj, Job):
        moved = _changed(obj, "status", new, deleted)
        if moved:
            record(
                session,
                EventType.JOB,
                obj.workspace_id,
                obj.name,
                obj.compute_name,
                *moved,
                _job_detail(obj.status_message, obj.error),
            )
    elif isinstance(obj, Node):
        moved = _changed(obj, "state", new, deleted)
        if moved:
            compute = None
            if obj.owner_type == COMPUTES and obj.owner_id is not None:
                with session.no_autoflush:
                    owner = session.get(Compute, obj.owner_id)
                compute = owner.name if owner is not None else None
            record(
                session,
                EventType.NODE,
                obj.workspace_id,
                obj.id,
                compute,
                *moved,
                _node_detail(obj.owner_type, obj.owner_id, obj.error),
            )
    elif isinstance(obj, Compute):
        for attribute in ("provisioning_state", "state"):
            moved = _changed(obj, attribute, new, deleted)
            if moved:
                detail = {"field": attribute, "type": obj.type}
                record(session, EventType.COMPUTE, obj.workspace_id, obj.name, obj.name, *moved, detail)
            if deleted:
                break
    elif isinstance(obj, Operation):
        moved = _changed(obj, "status", new, deleted)
        if moved:
            compute = obj.resource_name if obj.resource_type == COMPUTES else None
            detail = {"kind": obj.kind, "resource": f"{obj.resource_type}/{obj.resource_name}"}
            if isinstance(obj.error, dict) and obj.error.get("code"):
                detail["error"] = obj.error["code"]
            record(session, EventType.OPERATION, obj.workspace_id, obj.id, compute, *moved, detail)
    elif isinstance(obj, OnlineDeployment):
        moved = _changed(obj, "provisioning_state", new, deleted)
        if moved:
            with session.no_autoflush:
                endpoint = session.get(OnlineEndpoint, obj.endpoint_id)
            if endpoint is not None:
                detail = {
                    "kind": "online",
                    "stage": obj.stage,
                    **({"reason": obj.reason[:300]} if obj.reason else {}),
                }
                record(
                    session,
                    EventType.DEPLOYMENT,
                    endpoint.workspace_id,
                    f"{endpoint.name}/{obj.name}",
                    None,
                    *moved,
                    detail,
                )
    elif isinstance(obj, BatchDeployment) and (new or deleted):
        # No lifecycle state of its own (always Succeeded, as Azure shows it): made and deleted.
        with session.no_autoflush:
            batch_endpoint = session.get(BatchEndpoint, obj.endpoint_id)
        if batch_endpoint is not None:
            before, after = (None, SUCCEEDED) if new else (SUCCEEDED, DELETED)
            name = f"{batch_endpoint.name}/{obj.name}"
            record(
                session,
                EventType.DEPLOYMENT,
                batch_endpoint.workspace_id,
                name,
                None,
                before,
                after,
                {"kind": "batch"},
            )


_TRACKED = (Job, Node, Compute, Operation, OnlineDeployment, BatchDeployment)


@event.listens_for(Session, "before_flush")
def _before_flush(session: Session, flush_context: Any, instances: Any) -> None:
    for obj in session.new:
        if isinstance(obj, _TRACKED):
            _from_object(session, obj, new=True, deleted=False)
    for obj in session.dirty:
        if isinstance(obj, _TRACKED):
            _from_object(session, obj, new=False, deleted=False)
    for obj in session.deleted:
        if isinstance(obj, _TRACKED):
            _from_object(session, obj, new=False, deleted=True)


@event.listens_for(Session, "before_commit")
def _before_commit(session: Session) -> None:
    if session.in_nested_transaction():
        return  # a savepoint's events are inserted with its outermost transaction
    insert_pending(session)


def insert_pending(session: Session) -> None:
    """Insert SESSION's recorded events now, in commit order (the lock is held until the
    transaction ends); called just before commit."""
    session.flush()  # the ORM's pending moves, recorded by before_flush
    pending = session.info.pop(_KEY, None)
    if not pending:
        return
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": EVENTS_LOCK_KEY})
    connection.execute(insert(LifecycleEvent), pending)
    # After the commit, the publisher wakes the streams that watch these workspaces
    # (``feed_wake.py``); they no longer wait for their poll.
    effects.events_recorded(session, {row["workspace_id"] for row in pending})


@event.listens_for(Session, "after_transaction_create")
def _savepoint_begins(session: Session, transaction: SessionTransaction) -> None:
    if transaction.nested:
        session.info.setdefault(_MARKS, {})[id(transaction)] = len(session.info.get(_KEY) or ())


@event.listens_for(Session, "after_soft_rollback")
def _rolled_back(session: Session, previous_transaction: SessionTransaction) -> None:
    marks = session.info.get(_MARKS) or {}
    mark = marks.pop(id(previous_transaction), None)
    if previous_transaction.nested and mark is not None:
        del _buffer(session)[mark:]
    elif previous_transaction.parent is None:
        session.info.pop(_KEY, None)
        session.info.pop(_MARKS, None)


@event.listens_for(Session, "after_commit")
def _committed(session: Session) -> None:
    if not session.in_transaction():
        session.info.pop(_MARKS, None)
