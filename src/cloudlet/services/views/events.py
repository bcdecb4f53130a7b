"""Reading the events feed: a workspace's events after a sequence number, and pruning the window.

A reader sees only its workspace's events (``workspaces.resolve`` with read access: 404 hides
another's workspace). A ``since`` below the pruning mark answers 410 with the oldest seq kept, so a
client knows it missed some and can resynchronise.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from cloudlet.domain.access.roles import Access
from cloudlet.domain.errors import CloudletError, forbidden, validation_error
from cloudlet.domain.events import Event, EventType, Retention, missed
from cloudlet.services.access import workspaces
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.store.schema import EventHorizon, LifecycleEvent

MAX_PAGE = 1000
DEFAULT_PAGE = 100


@dataclass(frozen=True)
class EventFilter:
    since: int | None = None  # None: from the oldest kept (never 410)
    type: str | None = None
    compute: str | None = None
    limit: int = DEFAULT_PAGE

    def checked(self) -> EventFilter:
        if self.since is not None and self.since < 0:
            raise validation_error("since", "since is a sequence number (0 or more)")
        if self.type is not None and self.type not in {t.value for t in EventType}:
            raise validation_error("type", f"type is one of {', '.join(t.value for t in EventType)}")
        if not 1 <= self.limit <= MAX_PAGE:
            raise validation_error("limit", f"limit is 1 to {MAX_PAGE}")
        return self


@dataclass(frozen=True)
class EventPage:
    events: list[Event]
    last_seq: int  # the ``since`` of the next page: the last event's seq (SINCE, or 0, when none)


def gone(oldest: int | None) -> CloudletError:
    error = CloudletError(
        code="EventsPruned",
        message="events after this sequence number were pruned (past the retention window); "
        "read from the oldest kept one",
        target="since",
        status=410,
    )
    error.details.append({"oldestSeq": oldest})
    return error


def scope(session: Session, ref: WorkspaceRef | None, caller: Caller) -> int | None:
    """Whose events CALLER may read: the workspace REF's row id, once the caller is checked to
    read it (404 otherwise); every workspace's (None) for an administrator when REF is None."""
    if ref is None:
        if not caller.is_admin:
            raise forbidden(f"'{caller.name}' is not an administrator")
        return None
    return workspaces.resolve(session, ref, caller, Access.READ).id


def page(session: Session, ws_id: int | None, wanted: EventFilter) -> EventPage:
    """Events after ``wanted.since`` in seq order (of workspace WS_ID; all workspaces when None,
    for an administrator), or 410 when some after it were pruned."""
    wanted = wanted.checked()
    since = wanted.since or 0
    query = select(LifecycleEvent).where(LifecycleEvent.seq > since)
    if ws_id is not None:
        query = query.where(LifecycleEvent.workspace_id == ws_id)
    if wanted.type is not None:
        query = query.where(LifecycleEvent.type == wanted.type)
    if wanted.compute is not None:
        query = query.where(LifecycleEvent.compute == wanted.compute)
    rows = session.scalars(query.order_by(LifecycleEvent.seq).limit(wanted.limit)).all()
    # Read after the rows: a prune that committed in between is seen, and answered 410.
    pruned_below = session.scalar(select(EventHorizon.pruned_below).where(EventHorizon.id == 1)) or 0
    if wanted.since is not None and missed(wanted.since, pruned_below):
        raise gone(session.scalar(select(func.min(LifecycleEvent.seq))))
    events = [
        Event(r.seq, r.at, r.workspace_id, r.type, r.name, r.compute, r.from_state, r.to_state, r.detail)
        for r in rows
    ]
    if events:
        return EventPage(events, events[-1].seq)
    # Nothing new: a reader that asked from the oldest goes on from the pruning mark (not 0,
    # which would read as "missed the pruned ones" next time).
    return EventPage(events, since if wanted.since is not None else max(since, pruned_below - 1))


def prune(session: Session, retention: Retention, now: float | None = None) -> int:
    """Delete the events past RETENTION and move the pruning mark; how many were deleted."""
    now = time.time() if now is None else now
    newest = session.scalar(select(func.max(LifecycleEvent.seq)))
    if newest is None:
        return 0
    at_cutoff = session.scalar(
        select(func.min(LifecycleEvent.seq)).where(LifecycleEvent.at >= now - retention.max_age_s)
    )
    first_kept = retention.first_kept(now, newest, at_cutoff)
    deleted = session.execute(delete(LifecycleEvent).where(LifecycleEvent.seq < first_kept)).rowcount  # type: ignore[attr-defined]
    horizon = session.get(EventHorizon, 1)
    if horizon is None:
        session.add(EventHorizon(id=1, pruned_below=first_kept))
    elif horizon.pruned_below < first_kept:
        horizon.pruned_below = first_kept
    return int(deleted or 0)
