"""Run specs built before the write transaction opens (issue 24, defect 1).

Building an attempt's run specs costs time linear in its processes (67 ms for 256 TensorFlow
tasks, 178 ms for 1,024 processes), and every writer queues behind the store's one write lock
while it runs. So a pass that may place a large attempt first reads, without the lock, what
placing needs (the job, its nodes' ids and addresses), builds the specs there, and hands them to
its short write transaction keyed by (job, attempt, nodes). The transaction re-checks under the
lock what the key stands for (the job is still queued at that attempt, the same nodes are still
idle: the scheduler picked them again) and writes the prepared specs, or builds them itself when
the state moved (``INLINE``) or leaves a large attempt for such a pass (``Deferred``).

Small attempts (most jobs: one process) are built in the transaction as before: their build
costs less than the extra read would.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from cloudlet.store import db
from cloudlet.store.db import EncodedJson

# An attempt of more processes than this is built before the write transaction, never in it
# (unless the pass that prepares it finds the state moved under it).
LARGE_PROCESSES = 32

PREPARED = "cloudlet_prepared_specs"
INLINE = "cloudlet_build_large_inline"
WANTED = "cloudlet_prepare_wanted"

Key = tuple[int, int, tuple[str, ...]]
Specs = list[tuple[str, dict[str, Any]]]


class Deferred(Exception):
    """A large attempt met without prepared specs in a transaction that must not build them: it
    stays queued (nothing written) for the pass that prepares it (``control/clusters.py``)."""


@dataclass(frozen=True)
class Prepared:
    """The specs of one attempt on given nodes, or why they cannot be made (the job then fails
    alone, in the write transaction, as if it had been built there)."""

    specs: Specs | None
    error: Exception | None = None
    encoded: list[EncodedJson] | None = None  # each spec's JSON, in order, when made before the lock

    def encode(self) -> Prepared:
        """The same, with each spec's JSON encoded now (before the lock)."""
        if self.specs is None:
            return self
        return Prepared(self.specs, None, [EncodedJson(json.dumps(spec)) for _, spec in self.specs])


def processes(doc: dict[str, Any], nodes: int) -> int:
    """How many run specs an attempt of DOC on NODES nodes makes (one per process)."""
    distribution = doc.get("distribution") or {}
    if str(distribution.get("type", "")).lower() == "tensorflow":
        return int(distribution.get("worker_count") or nodes) + int(
            distribution.get("parameter_server_count") or 0
        )
    return nodes * max(1, int(distribution.get("process_count_per_instance") or 1))


def is_large(doc: dict[str, Any], nodes: int) -> bool:
    return processes(doc, nodes) > LARGE_PROCESSES


def key(job_id: int, attempt: int, node_ids: Sequence[str]) -> Key:
    return (int(job_id), int(attempt), tuple(node_ids))


def install(session: Session, prepared: dict[Key, Prepared], inline: bool = True) -> None:
    """Give the write transaction SESSION the specs built before it; INLINE: it may build a large
    attempt itself when the state moved since (the preparing pass, which must make progress)."""
    session.info.setdefault(PREPARED, {}).update(prepared)
    session.info[INLINE] = inline


def take(session: Session, found: Key) -> Prepared | None:
    table: dict[Key, Prepared] = session.info.get(PREPARED, {})
    return table.pop(found, None)


def may_build_large(session: Session) -> bool:
    return bool(session.info.get(INLINE, False))


def want(session: Session, compute_id: int | None) -> None:
    """Record that a large attempt was left queued for the preparing pass."""
    session.info.setdefault(WANTED, set()).add(compute_id)


def wanted(session: Session) -> bool:
    """Whether this transaction left a large attempt for the preparing pass (wake it)."""
    return bool(session.info.pop(WANTED, None))


def read_only(sessions: sessionmaker[Session]) -> Session:
    """A session that takes no write lock (``store.db.read_session_factory``): each statement
    reads the latest commit."""
    return db.read_only(sessions)
