"""The provider sweep: orphans, stuck terminations and launches a crash interrupted.

Every ``SWEEP_EVERY_S`` each provider's listing runs on that provider's workers (never on the
pass), and then:
- a machine the store does not hold (unknown, or its node ended) is an orphan and is terminated;
- a node ``terminating`` longer than the stuck-state table allows is terminated again, every
  ``TERMINATE_RETRY_S``, until the table says to give up: then the node keeps its state with a
  ``TerminateFailed`` error and an audit entry, for a person, instead of being retried forever;
- a node ``requested`` whose launch was never recorded (the control plane stopped in between) is
  adopted if the provider made its machine, else it simply ends;
- a batch engine's word on each machine (``SupportsNodeStatus``: pending with its reason, or
  preempted) is recorded, and a preempted node evicted (``control/engine_status.py``);
- an engine that owns its capacity (``CapacityOwner``) is asked for its offer, which the passes
  then read (``providers.capacity.CapacityReadings``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.control.engine_status import apply_statuses
from cloudlet.control.loop import one_item
from cloudlet.control.node_records import NodeRecorder
from cloudlet.control.provider_work import ProviderWork
from cloudlet.domain.compute.nodes import HOLDING, NodeEvent, NodeState, StuckAction, stuck_action
from cloudlet.providers.base import NodeHandle, NodeProvider, SupportsNodeStatus
from cloudlet.providers.capacity import CapacityReadings, ask_capacity
from cloudlet.services.access import audit
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.core.clock import Clock
from cloudlet.store import db
from cloudlet.store.schema import Node

log = logging.getLogger("cloudlet.sweep")

SWEEP_EVERY_S = 2.0
TERMINATE_FAILED = "TerminateFailed"


class ProviderSweep:
    def __init__(
        self,
        providers: Mapping[str, NodeProvider],
        sessions: sessionmaker[Session],
        installation_id: str,
        recorder: NodeRecorder,
        work: ProviderWork,
        clock: Clock,
        readings: CapacityReadings | None = None,
    ) -> None:
        self.providers = providers
        self.sessions = sessions
        self.installation_id = installation_id
        self.recorder = recorder
        self.work = work
        self.clock = clock
        self.readings = readings or CapacityReadings()
        self._last = float("-inf")

    def due(self, now: float) -> None:
        """From the pass: queue a sweep of every provider if one is due (a provider still busy
        with its last sweep is not asked again)."""
        if now - self._last < SWEEP_EVERY_S:
            return
        self._last = now
        for location in self.providers:
            self.work.submit(location, ("sweep", location), partial(self.sweep, location))

    def sweep(self, location: str) -> None:
        provider = self.providers[location]
        listed_at = self.clock.now()
        try:
            handles = provider.list_nodes(self.installation_id)
        except Exception:
            log.exception("listing %s nodes failed", location)
            return
        alive = {h.node_id for h in handles}
        self.recorder.listed(location, alive, listed_at)
        self._terminate_orphans(location, provider, handles, alive)
        self._retry_terminations(location)
        self.adopt_or_fail(location, handles, self.clock.now())
        if isinstance(provider, SupportsNodeStatus):  # a batch engine: pending, preempted
            statuses = {h.node_id: s for h in handles if (s := provider.node_status(h)) is not None}
            self.work.carry_out(apply_statuses(self.sessions, location, statuses, self.clock.now()))
        # An engine that owns its capacity is asked here, on its workers, for the passes to read.
        self.readings.record(location, ask_capacity(provider, self.clock.now()))

    def _terminate_orphans(
        self, location: str, provider: NodeProvider, handles: list[NodeHandle], alive: set[str]
    ) -> None:
        with db.read_only(self.sessions) as session:  # a read, each sweep of each worker: no write lock
            known = dict(session.execute(select(Node.id, Node.state).where(Node.id.in_(alive))).all())
        for handle in handles:
            state = known.get(handle.node_id)
            if state is None or NodeState(state) not in HOLDING:
                log.info("terminating orphan node %s (%s)", handle.node_id, location)
                try:
                    provider.terminate(handle)
                except Exception:  # the next sweep tries again; the other orphans go now
                    log.exception("terminating orphan node %s failed", handle.node_id)

    def _retry_terminations(self, location: str) -> None:
        now = self.clock.now()
        with self.sessions.begin() as session:
            stuck = session.scalars(
                select(Node).where(Node.location == location, Node.state == NodeState.TERMINATING.value)
            )
            for node in stuck:
                if (node.error or {}).get("code") == TERMINATE_FAILED:
                    continue  # given up on: a person decides
                with one_item(f"retrying the termination of node {node.id}", session, logger=log):
                    action = stuck_action(NodeState.TERMINATING, node.state_since, now, now)
                    if action is StuckAction.RETRY_TERMINATE:
                        self.work.terminate(node.id, node.location, dict(node.provider_ref))
                    elif action is StuckAction.GIVE_UP:
                        self._give_up(session, node, now)

    def _give_up(self, session: Session, node: Node, now: float) -> None:
        message = f"the provider did not terminate the machine within {now - node.state_since:.0f} s"
        node.error = {"code": TERMINATE_FAILED, "message": message}
        audit.record(
            session, audit.system("autoscaler"), "node.terminateFailed", f"nodes/{node.id}", node.error
        )
        log.error("node %s: %s; no more retries", node.id, message)

    def adopt_or_fail(self, location: str, handles: list[NodeHandle], now: float) -> None:
        """A node recorded as requested whose launch never got recorded (a crash in between): adopt
        the machine if the provider made it; else it never existed, so it simply ends (a failed
        node would sit in list-nodes as unusable for the post-mortem time, for no machine at all).
        A launch still queued or running in this process is not interrupted: it is left alone."""
        by_id = {h.node_id: h for h in handles}
        with self.sessions.begin() as session:
            pending = session.scalars(
                select(Node).where(Node.location == location, Node.state == NodeState.REQUESTED.value)
            )
            for node in pending:
                action = stuck_action(NodeState.REQUESTED, node.state_since, now, now)
                if action is not StuckAction.ADOPT_OR_FAIL or self.work.busy("launch", node.id):
                    continue
                with one_item(f"adopting node {node.id}", session, logger=log):
                    self._adopt_or_end(node, by_id.get(node.id), now)

    @staticmethod
    def _adopt_or_end(node: Node, handle: NodeHandle | None, now: float) -> None:
        if handle is not None:
            node.provider_ref = dict(handle.provider_ref)
            node_service.advance(node, NodeEvent.ALLOCATE, now)
            node_service.advance(node, NodeEvent.BOOT, now)
        else:
            node.error = {"code": "LaunchInterrupted", "message": "the control plane stopped first"}
            node_service.advance(node, NodeEvent.TERMINATE, now)
            node_service.advance(node, NodeEvent.TERMINATED, now)
