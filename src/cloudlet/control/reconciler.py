"""The operation reconciler: claims operations under a lease and drives their steps.

Claiming is a compare-and-swap on ``fencing_token`` (portable across SQLite and PostgreSQL), so
two replicas never hold the same operation. Every step runs in one transaction that first
re-asserts the lease (``UPDATE … WHERE fencing_token = mine``), then journals the step (unique per
operation and step), then applies its effect: a replica that lost its lease writes nothing, and a
step is never carried out twice. A restarted server picks up whatever was in flight once the
lease lapses, or at once if it is the same replica (same home) coming back.

What a step does is the target type's step set (``control/steps.py``): this module knows no
resource type, and claims only operations on the types its registry drives.
"""

from __future__ import annotations

import functools
import logging
import os
import time

from sqlalchemy import Select, bindparam, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.control.loop import ReconcileLoop
from cloudlet.control.steps import Pending, StepRegistry
from cloudlet.domain.compute.operation_plans import step_after
from cloudlet.services.compute import operations
from cloudlet.services.core.clock import WALL_CLOCK, Clock, utcnow
from cloudlet.store import db
from cloudlet.store.schema import Operation, OperationStep

log = logging.getLogger("cloudlet.reconciler")


@functools.cache
def _claimable_query(resource_types: tuple[str, ...], replica_id: str) -> Select[str, int]:
    """In-progress operations on RESOURCE_TYPES that REPLICA_ID may claim at ``:now``: built once
    (the poll runs every ``poll_s`` in every worker of the server)."""
    return (
        select(Operation.id, Operation.fencing_token)
        .where(
            Operation.status == operations.IN_PROGRESS,
            Operation.resource_type.in_(resource_types),
            or_(
                Operation.lease_owner.is_(None),
                Operation.lease_expires_at < bindparam("now"),
                Operation.lease_owner == replica_id,
            ),
        )
        .order_by(Operation.created_on)
        .limit(32)
    )


class LeaseLost(Exception):
    """Another replica holds the operation now; stop without writing."""


class OperationReconciler(ReconcileLoop):
    def __init__(
        self,
        sessions: sessionmaker[Session],
        replica_id: str,
        steps: StepRegistry,
        lease_ttl_s: float = 10.0,
        poll_s: float = 0.5,
        step_delay_s: float | None = None,
        clock: Clock = WALL_CLOCK,
    ) -> None:
        super().__init__("operation-reconciler", poll_s, clock)
        self.sessions = sessions
        self.replica_id = replica_id
        self.steps = steps
        self.lease_ttl_s = lease_ttl_s
        self.poll_s = poll_s
        # Fault injection for crash tests: hold each step open this long before doing it.
        env_delay = os.environ.get("CLOUDLET_FAULT_STEP_DELAY_S")
        self.step_delay_s = step_delay_s if step_delay_s is not None else float(env_delay or 0)

    # -- one pass --------------------------------------------------------------------------
    def pass_once(self, now: float) -> float:
        return 0.0 if self.run_once() else self.poll_s

    def run_once(self) -> int:
        done = 0
        for op_id, token in self._claimable():
            try:
                mine = self._claim(op_id, token)
                if mine is not None:
                    done += self._drive(op_id, mine)
            except LeaseLost:
                log.info("lease on operation %s lost to another replica", op_id)
            except Exception:  # this operation retries on the next pass; the others go on now
                log.exception("operation %s: pass failed", op_id)
        return done

    def _claimable(self) -> list[tuple[str, int]]:
        # Read without the store's write lock: this runs every poll in every worker, and most
        # passes find nothing (a claim is its own compare-and-swap write, ``_claim``).
        with db.read_only(self.sessions) as session:
            rows = session.execute(
                _claimable_query(tuple(self.steps.resource_types), self.replica_id), {"now": self.clock.now()}
            ).all()
        return [(op_id, token) for op_id, token in rows]

    def _claim(self, op_id: str, seen_token: int) -> int | None:
        token = seen_token + 1
        with self.sessions.begin() as session:
            result = session.execute(
                update(Operation)
                .where(
                    Operation.id == op_id,
                    Operation.fencing_token == seen_token,
                    Operation.status == operations.IN_PROGRESS,
                )
                .values(
                    lease_owner=self.replica_id,
                    lease_expires_at=self.clock.now() + self.lease_ttl_s,
                    fencing_token=token,
                )
            )
            return token if result.rowcount == 1 else None  # type: ignore[attr-defined]

    def _drive(self, op_id: str, token: int) -> bool:
        """Run the operation's steps until it ends or waits; True if anything moved."""
        moved = False
        while True:
            if self.step_delay_s:
                time.sleep(self.step_delay_s)
            outcome = self._step(op_id, token)
            after = self.steps.take_after_commit()
            for work in after:  # provider calls, now that the step's records are committed
                try:
                    work()
                except Exception:  # the next pass sees the world as it is and retries
                    log.exception("operation %s: provider call failed", op_id)
            if outcome == "pending" and not after:
                return moved  # waiting for an agent or its apps: come back on the next pass
            moved = True
            if outcome == "ended":
                return moved

    def _step(self, op_id: str, token: int) -> str:
        """Run the operation's current step: "ended", "advanced" or "pending" (it waits)."""
        self.steps.discard()
        with self.sessions.begin() as session:
            op = session.get(Operation, op_id)
            if op is None or op.status != operations.IN_PROGRESS:
                return "ended"
            step = op.step
            following = step_after(self.steps.plan(op), step)
            self._assert_lease(session, op_id, token, following or step)
            error = self.steps.apply(session, op, step)
            if isinstance(error, Pending):
                op.step = step  # not journalled: the step runs again on the next pass
                return "pending"
            try:
                with session.begin_nested():
                    session.add(
                        OperationStep(
                            operation_id=op_id,
                            step=step,
                            executor=self.replica_id,
                            fencing_token=token,
                            at=utcnow(),
                        )
                    )
            except IntegrityError:
                # Journalled already (a crash after commit cannot happen, so this is a lost race).
                raise LeaseLost(op_id) from None
            if error is not None:
                op.step = step  # the step that failed, not the one that would have followed
                op.status, op.error, op.ended_on, op.lease_owner = operations.FAILED, error, utcnow(), None
                return "ended"
            if following is None:
                op.status, op.ended_on, op.lease_owner = operations.SUCCEEDED, utcnow(), None
                return "ended"
            return "advanced"

    def _assert_lease(self, session: Session, op_id: str, token: int, next_step: str) -> None:
        result = session.execute(
            update(Operation)
            .where(
                Operation.id == op_id,
                Operation.fencing_token == token,
                Operation.lease_owner == self.replica_id,
            )
            .values(step=next_step, lease_expires_at=self.clock.now() + self.lease_ttl_s)
            .execution_options(synchronize_session="fetch")
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            raise LeaseLost(op_id)
