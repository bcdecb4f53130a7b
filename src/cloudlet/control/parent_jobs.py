"""The parent-job loop: pipelines and sweeps advance by submitting, cancelling and settling children.

Each pass reads the active parents; for each (under the loop's lease, in its own transaction, so
one parent that fails to advance never holds up the others: its error goes on its status
message) it reads the children, asks the parent's kind what to do (``domain.jobs.parent_jobs``:
pure), and carries the answer out (``services.jobs.parent_jobs.apply_step``). New children are placed
at once on idle nodes of their computes, as a submission's are, and the autoscaler is told of the
rest: a step hand-off is a child's exit, a commit and one pass, not a pass interval. The loop is
woken whenever a commit gave a parent work (``services.core.effects``: a child moved, a parent
was submitted or asked to cancel) and passes at least every second.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.control.loop import LeaseCache, ReconcileLoop, one_item
from cloudlet.domain.errors import CloudletError, failure_text
from cloudlet.domain.jobs.job_kind import JobKind
from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.domain.jobs.parent_kinds import KINDS
from cloudlet.services.core.clock import WALL_CLOCK, Clock
from cloudlet.services.core.notify import NodeNotifier
from cloudlet.services.core.storage import DataRoot
from cloudlet.services.jobs import dispatch, job_children, prepared_specs
from cloudlet.services.jobs import parent_jobs as service
from cloudlet.services.jobs.job_status import ACTIVE_VALUES, set_status
from cloudlet.store import db
from cloudlet.store.schema import Job, Workspace

log = logging.getLogger("cloudlet.parents")

LEASE = "parent-jobs"
PARENT_KINDS = tuple(kind.value for kind in KINDS)  # every kind domain.jobs.parent_kinds runs
# (session, child job ids, metric key) → {job id: [(step, value), …]} (``services.tracking.tracking``).
MetricHistory = Callable[[Session, Sequence[int], str], dict[int, list[tuple[int, float]]]]
_ACTIVE_PARENTS = (
    select(Job.id).where(Job.kind.in_(PARENT_KINDS), Job.status.in_(ACTIVE_VALUES)).order_by(Job.id)
)


@dataclass
class _After:
    """What a parent's pass hands on once its transaction has committed."""

    deliveries: list[tuple[str, dict[str, Any]]]
    wake: list[str]
    rescale: bool


class ParentJobLoop(ReconcileLoop):
    def __init__(
        self,
        sessions: sessionmaker[Session],
        replica_id: str,
        data: DataRoot,
        notifier: NodeNotifier,
        server_url: Callable[[], str],
        rescale: Callable[[], None],
        metric_history: MetricHistory | None = None,
        poll_s: float = 1.0,
        lease_ttl_s: float = 10.0,
        clock: Clock = WALL_CLOCK,
    ) -> None:
        super().__init__("parent-jobs", poll_s, clock)
        self.sessions = sessions
        self.data = data
        self.notifier = notifier
        self.server_url = server_url
        self.rescale = rescale
        self.metric_history = metric_history
        self.leases = LeaseCache(sessions, replica_id, lease_ttl_s)

    def pass_once(self, now: float) -> float:
        token = self.leases.token(LEASE, now)
        if token is None:
            return self.interval_s
        with db.read_only(self.sessions) as session:  # most passes find none: no write lock
            parents = list(session.scalars(_ACTIVE_PARENTS))
        for job_id in parents:
            # This parent's own failure (its failing included): the others still advance.
            with one_item(
                f"advancing parent job #{job_id}", None, partial(self._record_failure, job_id), log
            ):
                self._advance_one(job_id, token, now)
        return self.interval_s

    def _advance_one(self, job_id: int, token: int, now: float) -> None:
        try:
            after = self._advance(job_id, token, now)
        except CloudletError as exc:  # a child it asked for cannot be: the parent fails
            after = self._fail(job_id, token, exc, now)
        if after is not None:
            self._hand_on(after)

    def _advance(self, job_id: int, token: int, now: float) -> _After | None:
        with self.sessions.begin() as session:
            if not self.leases.still_held(session, LEASE, token):
                return None
            parent = session.get(Job, job_id)
            if parent is None or parent.status not in ACTIVE_VALUES:
                return None
            kind = KINDS.get(JobKind(parent.kind))
            if kind is None:  # a kind this server does not run (an older replica's, say)
                set_status(
                    parent, JobStatus.FAILED, now, message=f"job type '{parent.kind}' is not supported"
                )
                return None
            workspace = session.get(Workspace, parent.workspace_id)
            assert workspace is not None
            kids = job_children.children(session, parent)
            histories = self._metrics(session, kind.metric_keys(parent.spec), kids)
            views = [job_children.view_of(kid, histories.get(kid.id)) for kid in kids]
            step = kind.advance(parent.spec, views, service.context_of(parent, now))
            applied = service.apply_step(session, workspace, parent, step, kids, self.data, now)
            wake = applied.wake_nodes + dispatch.schedule_freed(
                session, [], self.data, self.server_url(), fed=applied.fed
            )
            submitted = len(step.submit) > 0
        submitted = submitted or prepared_specs.wanted(session)  # the cluster pass prepares it
        return _After(dispatch.deliveries(session), wake, submitted)

    def _metrics(
        self, session: Session, keys: Sequence[str], kids: list[Job]
    ) -> dict[int, dict[str, list[tuple[int, float]]]]:
        found: dict[int, dict[str, list[tuple[int, float]]]] = {}
        if not keys or not kids or self.metric_history is None:
            return found
        ids = [kid.id for kid in kids]
        for key in keys:
            for job_id, series in self.metric_history(session, ids, key).items():
                found.setdefault(job_id, {})[key] = series
        return found

    def _hand_on(self, after: _After) -> None:
        self.notifier.deliver(after.deliveries)
        for node_id in set(after.wake):
            self.notifier.notify(node_id)
        if after.rescale:
            self.rescale()  # serverless children, and clusters without an idle node

    def _fail(self, job_id: int, token: int, exc: CloudletError, now: float) -> _After | None:
        """A child the parent's kind asked for was refused (its compute went away, say): the
        parent fails with that reason once its other children are cancelled."""
        with self.sessions.begin() as session:
            if not self.leases.still_held(session, LEASE, token):
                return None
            parent = session.get(Job, job_id)
            if parent is None or parent.status not in ACTIVE_VALUES:
                return None
            reason = f"a child job could not be submitted: {exc.message}"
            wake = service.fail(session, parent, reason, now)
        return _After(dispatch.deliveries(session), wake, False)

    def _record_failure(self, job_id: int, exc: Exception) -> None:
        """Say on the parent's status message why it did not advance; the next pass retries."""
        try:
            with self.sessions.begin() as session:
                parent = session.get(Job, job_id)
                if parent is not None:
                    parent.status_message = f"could not advance: {failure_text(exc, 2000)}"
        except Exception:
            log.exception("could not record why parent job %s did not advance", job_id)
