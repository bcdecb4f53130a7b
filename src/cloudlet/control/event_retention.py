"""Pruning the events feed past its retention window (``domain.events.Retention``).

Every server runs it: deleting the same old rows twice is harmless, and the pruning mark only
moves forward, so it needs no lease.
"""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session, sessionmaker

from cloudlet.control.loop import ReconcileLoop
from cloudlet.domain.events import Retention
from cloudlet.services.core.clock import WALL_CLOCK, Clock
from cloudlet.services.views import events as feed

log = logging.getLogger("cloudlet.control.events")


class EventRetentionLoop(ReconcileLoop):
    def __init__(
        self, sessions: sessionmaker[Session], retention: Retention | None = None, clock: Clock = WALL_CLOCK
    ) -> None:
        self.retention = retention or Retention.from_env()
        super().__init__("event-retention", self.retention.prune_every_s, clock)
        self.sessions = sessions

    def pass_once(self, now: float) -> float:
        with self.sessions.begin() as session:
            pruned = feed.prune(session, self.retention, now)
        if pruned:
            log.info("pruned %d events past the retention window", pruned)
        return self.retention.prune_every_s
