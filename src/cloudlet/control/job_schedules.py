"""The job-schedule loop: each due, enabled schedule (``az ml schedule``) makes its job.

Under its lease, each pass reads the schedules whose next fire time has come (read-only: most
passes find none) and fires each in its own transaction (``services.jobs.schedules.fire``): the
job is submitted through the jobs service and the fire time recorded in the same commit, so a
fire makes one job however the server stops (a job name per fire time guards the rest). One
schedule that cannot make its job (its compute gone, quota, a deleted environment) has the reason
recorded on it (``last_error``) and never stops the others. New jobs are placed at once on idle
nodes, as a submission's are, and the autoscaler is told of the rest.

The loop passes every ``poll_s`` (1 s) at most, sooner when the next fire time is nearer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

from sqlalchemy.orm import Session, sessionmaker

from cloudlet.control.loop import LeaseCache, ReconcileLoop, one_item
from cloudlet.domain.errors import failure_text
from cloudlet.services.core.clock import WALL_CLOCK, Clock
from cloudlet.services.core.notify import NodeNotifier
from cloudlet.services.core.storage import DataRoot
from cloudlet.services.jobs import dispatch, prepared_specs
from cloudlet.services.jobs import schedules as service
from cloudlet.store import db

log = logging.getLogger("cloudlet.schedules")

LEASE = "job-schedules"


class JobScheduleLoop(ReconcileLoop):
    def __init__(
        self,
        sessions: sessionmaker[Session],
        replica_id: str,
        data: DataRoot,
        notifier: NodeNotifier,
        server_url: Callable[[], str],
        rescale: Callable[[], None],
        poll_s: float = 1.0,
        lease_ttl_s: float = 10.0,
        clock: Clock = WALL_CLOCK,
    ) -> None:
        super().__init__("job-schedules", poll_s, clock)
        self.sessions = sessions
        self.data = data
        self.notifier = notifier
        self.server_url = server_url
        self.rescale = rescale
        self.leases = LeaseCache(sessions, replica_id, lease_ttl_s)

    def pass_once(self, now: float) -> float:
        token = self.leases.token(LEASE, now)
        if token is None:
            return self.interval_s
        with db.read_only(self.sessions) as session:
            due = service.due_ids(session, now)
        for schedule_id in due:
            # This schedule's failure is recorded on it; the others still fire.
            with one_item(
                f"firing job schedule #{schedule_id}",
                None,
                partial(self._record_failure, schedule_id, now),
                log,
            ):
                self._fire(schedule_id, token, now)
        with db.read_only(self.sessions) as session:
            soonest = service.soonest(session)
        if soonest is None:
            return self.interval_s
        return max(0.0, min(self.interval_s, soonest - self.clock.now()))

    def _fire(self, schedule_id: int, token: int, now: float) -> None:
        with self.sessions.begin() as session:
            if not self.leases.still_held(session, LEASE, token):
                return
            fired = service.fire(session, schedule_id, now, self.data)
            fed = {fired.compute.id: fired.compute} if fired.compute is not None else {}
            wake = dispatch.schedule_freed(session, [], self.data, self.server_url(), fed=fed)
            made = fired.job.name if fired.job is not None else None
        rescale = made is not None or prepared_specs.wanted(session)
        self.notifier.deliver(dispatch.deliveries(session))
        for node_id in set(wake):
            self.notifier.notify(node_id)
        if rescale:
            self.rescale()  # serverless jobs, and clusters without an idle node
        if made is not None:
            log.info("schedule #%s made job %s", schedule_id, made)

    def _record_failure(self, schedule_id: int, now: float, exc: Exception) -> None:
        """Say on the schedule why its fire made no job; that fire is passed over."""
        try:
            with self.sessions.begin() as session:
                service.record_failure(session, schedule_id, now, failure_text(exc, 2000))
        except Exception:
            log.exception("could not record why job schedule %s did not fire", schedule_id)
