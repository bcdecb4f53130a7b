"""The instance watch: idle shutdown, start/stop schedules, disk full and lost agents of compute
instances (issue 4, I5 and I13).

Every ``CLOUDLET_INSTANCE_TICK_S`` (1 s) one replica — the holder of the named lease
``instance-watch`` — looks at every Running, Unusable or Stopped instance in one transaction that
first re-asserts the lease (fencing: a replica that lost it writes nothing). For each it gathers the
stored facts (``services/compute/instance_activity.py``), lets ``domain/compute/instance_watch.decide_tick``
decide,
and applies the verdict: an ordinary ``stop`` or ``start`` operation (``created_by`` ``idle-shutdown``
or ``schedule``; the operation reconciler carries it out), or the move to Unusable with its reason
kept in the compute's ``errors``. ``schedule_checked_at`` advances every tick, so each scheduled
occurrence fires once.

The OS disk's fullness comes from the agent's report (``Node.report["disk"]``); a node whose agent
does not report it yet (an older agent) is checked here, on the control plane's host where the
local provider's OS disks live, at most every ``LOCAL_DISK_CHECK_S``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from functools import partial

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.control.clusters import RECONCILE_FAILED, reconcile_error, without_reconcile_error
from cloudlet.control.loop import LeaseCache, ReconcileLoop, one_item
from cloudlet.domain.compute.compute_types import ComputeType
from cloudlet.domain.compute.instance_watch import (
    AGENT_LOST,
    DISK_FULL,
    InstanceFacts,
    decide_tick,
    without_unusable,
)
from cloudlet.domain.compute.lifecycle import InstanceEvent, InstanceState, advance_instance
from cloudlet.domain.compute.nodes import NodeEvent
from cloudlet.domain.jobs.run_state import ExitReason
from cloudlet.services.access import audit, workspaces
from cloudlet.services.compute import instance_activity as activity
from cloudlet.services.compute import instances as instance_service
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.compute import operations
from cloudlet.services.core.clock import WALL_CLOCK, Clock
from cloudlet.services.core.storage import DataRoot
from cloudlet.services.jobs import exits
from cloudlet.store import db
from cloudlet.store.schema import Compute, Node, Workspace

log = logging.getLogger("cloudlet.instance_watch")

LEASE = "instance-watch"
WATCHED = (InstanceState.RUNNING.value, InstanceState.UNUSABLE.value, InstanceState.STOPPED.value)
_ANY_WATCHED = (
    select(Compute.id)
    .where(Compute.type == ComputeType.COMPUTE_INSTANCE, Compute.state.in_(WATCHED))
    .limit(1)
)
LOCAL_DISK_CHECK_S = 3.0
_EVENTS = {DISK_FULL: InstanceEvent.DISK_FULL, AGENT_LOST: InstanceEvent.AGENT_LOST}
_OPERATIONS = {"stop": InstanceEvent.STOP, "start": InstanceEvent.START}


class InstanceWatch(ReconcileLoop):
    def __init__(
        self,
        sessions: sessionmaker[Session],
        replica_id: str,
        data: DataRoot,
        lease_ttl_s: float = 10.0,
        tick_s: float | None = None,
        on_operation: Callable[[], None] | None = None,
        clock: Clock = WALL_CLOCK,
    ) -> None:
        tick_s = tick_s if tick_s is not None else float(os.environ.get("CLOUDLET_INSTANCE_TICK_S") or 1.0)
        super().__init__("instance-watch", tick_s, clock)
        self.sessions = sessions
        self.replica_id = replica_id
        self.data = data
        self.tick_s = tick_s
        self.on_operation = on_operation
        self.leases = LeaseCache(sessions, replica_id, lease_ttl_s)
        self._disk_checked: dict[int, tuple[float, str | None]] = {}
        # After a restart, agents need a moment to find us again before silence means "lost".
        self._started = clock.now()

    def pass_once(self, now: float) -> float:
        self.run_once(now)
        return self.tick_s

    # -- one tick ------------------------------------------------------------------------------
    def run_once(self, now: float | None = None) -> list[tuple[str, str]]:
        """One tick over every watched instance; returns (instance, what was done) pairs."""
        now = self.clock.now() if now is None else now
        token = self.leases.token(LEASE, now)
        if token is None or not self._any_watched():
            return []
        done: list[tuple[str, str]] = []
        with self.sessions.begin() as session:
            if not self.leases.still_held(session, LEASE, token):
                return []
            computes = session.scalars(
                select(Compute).where(
                    Compute.type == ComputeType.COMPUTE_INSTANCE, Compute.state.in_(WATCHED)
                )
            )
            for compute in list(computes):
                what = ""  # each instance is its own: one that fails says so on its errors
                failed = partial(_failed, compute)
                with one_item(f"instance {compute.name}: watch tick", session, failed, log):
                    what = self._tick(session, compute, now)
                    if any(e.get("code") == RECONCILE_FAILED for e in compute.errors or []):
                        compute.errors = without_reconcile_error(compute.errors)  # recovered
                if what:
                    done.append((compute.name, what))
        if any(what.startswith(("stop", "start")) for _, what in done) and self.on_operation:
            self.on_operation()
        return done

    def _any_watched(self) -> bool:
        """Whether an instance is watched at all, read without the write lock: a server with no
        instance (most of them) writes nothing each tick."""
        with db.read_only(self.sessions) as reads:
            return reads.scalar(_ANY_WATCHED) is not None

    def _tick(self, session: Session, compute: Compute, now: float) -> str:
        node = activity.current_node(session, compute)
        facts = activity.facts(session, compute, now, node)
        facts = self._adjust(compute, node, facts, now)
        verdict = decide_tick(facts)
        checked = verdict.schedule_checked_at.timestamp() if verdict.schedule_checked_at else None
        if not facts.schedules:
            checked = None  # added later, schedules start from then: nothing of the past replays
        if compute.schedule_checked_at != checked:
            compute.schedule_checked_at = checked
        if compute.state == InstanceState.RUNNING.value and without_unusable(compute.errors) != list(
            compute.errors or []
        ):
            compute.errors = without_unusable(compute.errors)  # Running again after a restart
        if verdict.unusable is not None:
            return self._unusable(session, compute, node, verdict.unusable, now)
        if verdict.operation is not None:
            before = compute.state
            compute.state = advance_instance(compute.state, _OPERATIONS[verdict.operation], compute.name)
            op = operations.start(session, compute, verdict.operation, verdict.created_by or "instance-watch")
            details = {
                "old_state": before,
                "new_state": compute.state,
                "operation_id": op.id,
                "reason": verdict.why,
                "trigger": verdict.created_by,
            }
            workspace = session.get(Workspace, compute.workspace_id)
            assert workspace is not None
            target = workspaces.ref_of(session, workspace).compute_id(compute.name)
            audit.record(session, audit.system(LEASE), f"compute.{verdict.operation}", target, details)
            log.info(
                "instance %s: %s by %s (%s)", compute.name, verdict.operation, verdict.created_by, verdict.why
            )
            return f"{verdict.operation} by {verdict.created_by}: {verdict.why}"
        return ""

    def _adjust(self, compute: Compute, node: Node | None, facts: InstanceFacts, now: float) -> InstanceFacts:
        """What only this process knows: its own start (a grace for agents to find a restarted
        server) and, for a node that does not report its disk, a local look at the OS disk."""
        if facts.quiet_s is not None:
            facts = dataclasses.replace(facts, quiet_s=min(facts.quiet_s, now - self._started))
        if node is None or "disk" in (node.report or {}) or facts.state != InstanceState.RUNNING.value:
            return facts
        at, reason = self._disk_checked.get(compute.id, (0.0, None))
        if now - at >= LOCAL_DISK_CHECK_S:
            reason = instance_service.os_disk_full(self.data, compute)
            self._disk_checked[compute.id] = (now, reason)
        return dataclasses.replace(facts, disk_full=reason) if reason else facts

    def _unusable(
        self, session: Session, compute: Compute, node: Node | None, why: tuple[str, str], now: float
    ) -> str:
        code, reason = why
        compute.state = advance_instance(compute.state, _EVENTS[code], compute.name)
        compute.errors = [*without_unusable(compute.errors), {"code": code, "message": reason}]
        self._disk_checked.pop(compute.id, None)
        if code == AGENT_LOST and node is not None:
            node.error = {"code": "NodeLost", "message": "the instance's agent stopped reporting"}
            node_service.advance(node, NodeEvent.LOSE, now)
            exits.fail_runs_on_node(session, node, ExitReason.LOST, now)
        log.warning("instance %s is Unusable: %s", compute.name, reason)
        return f"unusable: {reason}"


def _failed(compute: Compute, exc: Exception) -> None:
    """The tick failed on COMPUTE (its writes undone): say so on its errors, once."""
    error = reconcile_error(exc, "the instance watch could not look after this instance")
    if error not in (compute.errors or []):
        compute.errors = [*without_reconcile_error(compute.errors), error]
