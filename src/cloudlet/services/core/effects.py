"""A unit of work's after-commit effects: what a use case changed that others must hear of.

A service records, on the session it writes with, what its change means for the rest of the
system (these nodes have new commands; demand for machines changed; an operation waits; a parent
job has work; an online endpoint's desired state changed; the events feed grew). It never calls
the loops or the agents itself. One publisher, built by ``server.build_state`` and installed on
every session factory, hears each commit and wakes what the effects name; a rolled-back change
wakes nothing.
(dstack's services hint their background pipeline after their own commit; Ray's autoscaler runs
side effects in subscribers.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sqlalchemy import event
from sqlalchemy.orm import Session, SessionTransaction, sessionmaker

_KEY = "cloudlet.effects"


@dataclass
class Effects:
    """What one transaction's commit must set in motion."""

    wake_nodes: set[str] = field(default_factory=set)  # their agents have new commands
    demand_changed: bool = False  # the cluster loop may need to make or release nodes
    operations_pending: bool = False  # the operation reconciler has a step to run
    parent_work: bool = False  # a pipeline or sweep has a next step
    endpoints_changed: bool = False  # an online endpoint's desired state moved
    notifications_pending: bool = False  # a job's end recorded notifications to send
    events_in: set[int] = field(default_factory=set)  # workspaces whose events feed grew

    def __bool__(self) -> bool:
        return bool(
            self.wake_nodes
            or self.demand_changed
            or self.operations_pending
            or self.parent_work
            or self.endpoints_changed
            or self.notifications_pending
            or self.events_in
        )


def of(session: Session) -> Effects:
    """The effects SESSION's transaction has recorded so far (made on first use). Recording
    begins the session's transaction if nothing has yet, so a rollback always forgets them."""
    if not session.in_transaction():
        session.begin()
    found = session.info.get(_KEY)
    if found is None:
        found = session.info[_KEY] = Effects()
    assert isinstance(found, Effects)
    return found


def wake_nodes(session: Session, node_ids: Iterable[str]) -> None:
    of(session).wake_nodes.update(node_ids)


def demand_changed(session: Session) -> None:
    of(session).demand_changed = True


def operations_pending(session: Session) -> None:
    """An operation was asked for, or one may be waiting for what just changed."""
    of(session).operations_pending = True


def parent_work(session: Session | None) -> None:
    """A parent job has work: a child moved, a parent was submitted or asked to cancel."""
    if session is not None:
        of(session).parent_work = True


def endpoints_changed(session: Session) -> None:
    of(session).endpoints_changed = True


def notifications_pending(session: Session) -> None:
    of(session).notifications_pending = True


def events_recorded(session: Session, workspace_ids: Iterable[int]) -> None:
    """The transaction inserted lifecycle events of WORKSPACE_IDS: their streams may read."""
    of(session).events_in.update(workspace_ids)


@dataclass
class Publisher:
    """Who hears which effect; built once per server (``server.build_state``). ``after`` runs
    for every commit, with or without recorded effects (the placed run specs' hand-over)."""

    wake_node: Callable[[str], None] = lambda _node: None
    on_demand: Callable[[], None] = lambda: None
    on_operations: Callable[[], None] = lambda: None
    on_parent_work: Callable[[], None] = lambda: None
    on_endpoints: Callable[[], None] = lambda: None
    on_notifications: Callable[[], None] = lambda: None
    on_events: Callable[[frozenset[int]], None] = lambda _workspaces: None
    after: Callable[[Session], None] = lambda _session: None

    def publish(self, recorded: Effects) -> None:
        for node_id in recorded.wake_nodes:
            self.wake_node(node_id)
        if recorded.demand_changed:
            self.on_demand()
        if recorded.operations_pending:
            self.on_operations()
        if recorded.parent_work:
            self.on_parent_work()
        if recorded.endpoints_changed:
            self.on_endpoints()
        if recorded.notifications_pending:
            self.on_notifications()
        if recorded.events_in:
            self.on_events(frozenset(recorded.events_in))

    def install(self, sessions: sessionmaker[Session]) -> None:
        """Publish each commit's effects of SESSIONS' sessions; forget a rolled-back one's."""

        def after_commit(session: Session) -> None:
            self.after(session)
            recorded = session.info.pop(_KEY, None)
            if recorded:
                self.publish(recorded)

        def after_rollback(session: Session, transaction: SessionTransaction) -> None:
            if transaction.parent is None:  # a savepoint's rollback keeps the rest's effects
                session.info.pop(_KEY, None)

        event.listen(sessions, "after_commit", after_commit)
        event.listen(sessions, "after_soft_rollback", after_rollback)
