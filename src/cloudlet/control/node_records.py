"""Record what the world did to live nodes: agents that went quiet, setups that never finished,
machines the provider no longer has. Shared by the cluster pass and the ephemeral (serverless and
``local``) pass, each over its own nodes inside its own transaction.

What counts as stuck, and for how long, is ``domain.compute.nodes.STUCK_RULES``; this applies it. The
provider listings (``ProviderSweep``) tell it which machines are alive: a node made before the
last listing and absent from it has vanished.
"""

from __future__ import annotations

from functools import partial

from sqlalchemy.orm import Session

from cloudlet.control.actions import Actions, record_failure
from cloudlet.control.engine_status import engine_pending
from cloudlet.control.loop import one_item
from cloudlet.domain.compute.nodes import NodeEvent, NodeState, StuckAction, stuck_action
from cloudlet.domain.jobs.run_state import ExitReason
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.jobs import exits
from cloudlet.store.schema import Node

# Listed this long before a node was made, the listing cannot know it yet.
LISTING_SLACK_S = 1.0


class NodeRecorder:
    def __init__(self, started: float) -> None:
        # After a restart, agents need a moment to find us again before silence means "lost".
        self.started = started
        self._alive: dict[str, frozenset[str]] = {}
        self._listed_at: dict[str, float] = {}

    def listed(self, location: str, alive: set[str], at: float) -> None:
        """A provider's listing, begun at AT (from a sweep worker: one assignment each, so a pass
        reading them concurrently sees either the old listing or the new one)."""
        self._alive[location] = frozenset(alive)
        self._listed_at[location] = at

    def vanished(self, node: Node) -> bool:
        """Known to the store, made by the provider before its last listing, absent from that listing.

        The machine is known to exist from when its agent registered, or (not yet registered) from
        when its launch was recorded (``state_since`` of an allocated or starting node), not from
        when the node was asked for: a provider whose create takes seconds (an API server's pod)
        may be listed in between, before its machine existed."""
        listed_at = self._listed_at.get(node.location)
        known_since = max(node.created_at, node.registered_at or node.state_since)
        if not node.provider_ref or listed_at is None or known_since > listed_at - LISTING_SLACK_S:
            return False
        return node.id not in self._alive.get(node.location, frozenset())

    def record(self, session: Session, nodes: list[Node], now: float) -> list[str]:
        """Mark lost and failed-setup nodes (their runs end, their jobs requeue); the node ids to
        wake. Each node is its own: one whose runs' jobs cannot settle (a row in an impossible
        state) keeps its state, says why on its ``error``, and the others are recorded."""
        wake: list[str] = []
        for node in nodes:
            event = self._event(node, now)
            if event is None:  # the usual case: no savepoint for a node nothing happens to
                continue
            failed = partial(record_failure, node, Actions(), (0, 0, 0))  # nothing queued to forget
            found: list[str] = []
            with one_item(f"recording node {node.id}", session, failed):
                found = _apply(session, node, event, now)
            wake += found
        return wake

    def _event(self, node: Node, now: float) -> tuple[NodeEvent, dict[str, str]] | None:
        """What befell NODE (the event and the error it leaves), if anything."""
        state = NodeState(node.state)
        if state not in _WATCHED:
            return None
        gone = self.vanished(node)
        last_report = max(node.last_heartbeat or node.registered_at or now, self.started)
        action = stuck_action(state, node.state_since, last_report, now)
        timed_out = action is StuckAction.SETUP_FAIL
        if state is NodeState.STARTING and timed_out and not gone and engine_pending(node):
            return None  # the engine has not run its machine yet: no boot to time out
        if state is NodeState.STARTING and (gone or action is StuckAction.SETUP_FAIL):
            message = "the agent did not register; see the node's agent.log"
            return NodeEvent.SETUP_FAIL, {"code": "NodeSetupFailed", "message": message}
        if state is not NodeState.STARTING and (gone or action is StuckAction.LOSE):
            message = "the node's machine is gone" if gone else "the node's agent stopped reporting"
            return NodeEvent.LOSE, {"code": "NodeLost", "message": message}
        return None


def _apply(session: Session, node: Node, event: tuple[NodeEvent, dict[str, str]], now: float) -> list[str]:
    kind, error = event
    node.error = error
    node_service.advance(node, kind, now)
    if kind is NodeEvent.LOSE:  # its runs end (and their jobs requeue)
        return exits.fail_runs_on_node(session, node, ExitReason.LOST, now)
    return []


_WATCHED = frozenset({NodeState.STARTING, NodeState.IDLE, NodeState.BUSY, NodeState.DRAINING})
