"""Online endpoints as a reconcile loop (issue 26): the store holds what is wanted (endpoints with
their keys and traffic, deployments with their spec and generation), the runtime
(``control/online_replicas.py``) holds what runs; each pass converges the second on the first.

A pass reads every endpoint and deployment row and
- forgets what is no longer stored (an endpoint or deployment deleted, or deleted and made again
  under the same name: its id differs): its replicas drain and stop in a thread of their own;
- gives the gateway each endpoint's keys, traffic and scoring path;
- rolls out each deployment's stored generation that the runtime has not taken up yet (after a
  restart: every one, so a killed server's deployments come back from the store by themselves);
- watches the replicas' liveness (a dead or failing one is replaced; in a thread of its own, one
  watch at a time, as a restart may wait for a node to be made);
- adds what this worker's gateway counted to each deployment's stored metrics
  (``services/endpoints/online_metrics.py``).

Of the servers that share a store, only the holder of the lease ``online-loop`` runs replicas
(rolls out, watches liveness, autoscales) and reports where they are on each deployment's row;
every other server's pass reads that report for its gateway (``control/online_serving.py``).

Writes wake it (``services/endpoints/online_endpoints`` records the effect, the request's commit
publishes it: ``services/core/effects.py``);
it also passes every ``INTERVAL_S``, so a wake-up lost (another worker's, another server's write)
costs at most that. Under ``--workers N`` only worker 0 may hold the lease; the others keep only
their gateway's keys and traffic and their metrics (``control/online_shared.py``) and pass a
wake-up on to worker 0.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.control import online_serving
from cloudlet.control.loop import LeaseCache, ReconcileLoop, one_item
from cloudlet.services.access import workspaces
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.endpoints import online_metrics
from cloudlet.store.schema import OnlineDeployment, OnlineEndpoint, Workspace

if TYPE_CHECKING:
    from cloudlet.control.online_ports import ReplicaRuntime
    from cloudlet.control.online_state import DeploymentState

log = logging.getLogger("cloudlet.online.loop")
INTERVAL_S = 0.5  # also the liveness watch's period
CHANGED_WAIT_S = 2.0  # the longest a write waits for the gateway to take it up


@dataclass
class Desired:
    """The stored endpoints and their deployments, read in one pass."""

    endpoints: list[OnlineEndpoint] = field(default_factory=list)
    deployments: dict[int, list[OnlineDeployment]] = field(default_factory=dict)
    refs: dict[int, WorkspaceRef] = field(default_factory=dict)

    @classmethod
    def read(cls, session: Session) -> Desired:
        desired = cls(list(session.scalars(select(OnlineEndpoint))))
        by_endpoint: dict[int, list[OnlineDeployment]] = defaultdict(list)
        for row in session.scalars(select(OnlineDeployment).order_by(OnlineDeployment.name)):
            by_endpoint[row.endpoint_id].append(row)
        desired.deployments = dict(by_endpoint)
        for ws_id in {e.workspace_id for e in desired.endpoints}:
            ws = session.get(Workspace, ws_id)
            if ws is not None:
                desired.refs[ws_id] = workspaces.ref_of(session, ws)
        return desired

    def ids(self) -> dict[tuple[int, str], int]:
        return {(e.workspace_id, e.name): e.id for e in self.endpoints}

    def deployment_ids(self, endpoint_id: int) -> dict[str, int]:
        return {d.name: d.id for d in self.deployments.get(endpoint_id, [])}


class OnlineLoop(ReconcileLoop):
    """RUNTIME converged on the store. CAN_LEAD: this worker may hold the lease and run the
    replicas (a server alone, or worker 0 of several); it does while it holds it (``leading``),
    else it follows the holder's report. A worker that cannot lead keeps only its gateway's view
    of keys and traffic (the rest comes from worker 0: ``control/online_shared.py``)."""

    def __init__(
        self,
        runtime: ReplicaRuntime,
        sessions: sessionmaker[Session],
        can_lead: bool = True,
        interval_s: float = INTERVAL_S,
        replica_id: str = "",
        lease_ttl_s: float = 10.0,
    ) -> None:
        super().__init__("online-loop", interval_s)
        self.runtime, self.sessions, self.can_lead = runtime, sessions, can_lead
        self.leases = LeaseCache(sessions, replica_id, lease_ttl_s)
        self.leading = False
        self.token: int | None = None  # the lease's fencing token while leading
        self._next_try = 0.0
        self._converged = threading.Condition()
        self._began = self._done = 0  # converges begun / the last one ended
        self._watching: threading.Thread | None = None

    def changed(self, wait_s: float = CHANGED_WAIT_S) -> None:
        """The desired state changed (a commit): wake the loop and wait (bounded) until a converge
        that began after now has ended, so the writer's next request meets its write at the
        gateway (a new key, a traffic split); the roll-out itself goes on in the background."""
        with self._converged:
            target = self._began + 1
        self.wake.set()
        if self.stopping or self._thread is None:
            return
        with self._converged:
            self._converged.wait_for(lambda: self._done >= target, wait_s)

    def pass_once(self, now: float) -> float:
        with self._converged:
            self._began += 1
            mine = self._began
        try:
            self.lead(now)
            with self.sessions() as session:
                desired = Desired.read(session)
                self.converge(desired)
                if self.leading:
                    self.report(session, desired)
                    self.take_demand(desired)
                elif self.can_lead:
                    self.follow(desired)
        finally:
            with self._converged:
                self._done = mine
                self._converged.notify_all()
        if self.leading and (self._watching is None or not self._watching.is_alive()):
            # In a thread: restarting a dead replica may wait minutes for a node to be made, and
            # the next pass must still take up writes; one watch at a time.
            self._watching = threading.Thread(target=self.runtime.watch_once, name="online-liveness")
            self._watching.daemon = True
            self._watching.start()
        self.flush_metrics()
        return self.interval_s

    def converge(self, desired: Desired) -> None:
        runtime = self.runtime
        self.forget_gone(desired)
        for row in desired.endpoints:
            ref = desired.refs.get(row.workspace_id)
            with one_item(f"converging online endpoint {row.name}", logger=log):
                runtime.sync_endpoint(row, ref)
                if not self.leading:
                    continue
                for deployment in desired.deployments.get(row.id, []):
                    if runtime.rolling.get(deployment.id) != deployment.generation and ref is not None:
                        runtime.deploy(row, deployment, ref)

    def forget_gone(self, desired: Desired) -> None:
        """Endpoints and deployments the store no longer has leave the gateway at once; their
        replicas drain and stop in a thread (a drain takes seconds)."""
        runtime, stored = self.runtime, desired.ids()
        gone: list[DeploymentState] = []
        with runtime.lock:
            for key, state in list(runtime.endpoints.items()):
                if stored.get(key) != state.id:
                    runtime.endpoints.pop(key)
                    gone += state.deployments.values()
                    continue
                wanted = desired.deployment_ids(state.id)
                for name, deployment in list(state.deployments.items()):
                    if wanted.get(name) != deployment.id:
                        gone.append(state.deployments.pop(name))
            runtime.paths = {path: key for path, key in runtime.paths.items() if key in runtime.endpoints}
            kept = {d.id for ds in desired.deployments.values() for d in ds}
            for deployment_id in [i for i in runtime.rolling if i not in kept]:
                runtime.rolling.pop(deployment_id)
        if gone and self.leading:
            replicas = [r for d in gone for r in d.replicas]
            drain = threading.Thread(target=runtime.retire, args=(replicas,), name="online-drain")
            drain.daemon = True
            drain.start()

    # --- the lease -----------------------------------------------------------------------------

    def lead(self, now: float) -> None:
        """Take, renew or lose the lease (a server that does not hold it tries every
        ``LEASE_TRY_S``: a try is a write), and act on the change."""
        if not self.can_lead or (not self.leading and now < self._next_try):
            return
        self._next_try = now + online_serving.LEASE_TRY_S
        self.token = self.leases.token(online_serving.LEASE, now)
        self._turn(online_serving.change(self.leading, self.token is not None))

    def _turn(self, change: online_serving.Change | None) -> None:
        if change is online_serving.Change.TAKE_OVER:
            self.take_over()
            self.leading = True
        elif change is online_serving.Change.STEP_DOWN:
            self.leading, self.token = False, None
            self.step_down()

    def fenced(self, session: Session) -> bool:
        """Whether this server still holds the lease, re-asserted in SESSION's writing
        transaction (a holder that lost it writes nothing and steps down)."""
        token = self.token
        if token is not None and self.leases.still_held(session, online_serving.LEASE, token):
            return True
        if self.leading:
            self._turn(online_serving.Change.STEP_DOWN)
        return False

    def report(self, session: Session, desired: Desired) -> None:
        """The holder's serving reports that changed, to the deployments' rows."""
        reports = self.changed_reports(desired)
        if not reports:
            return
        if not self.fenced(session):
            session.rollback()
            return
        online_serving.write_reports(session, reports)
        session.commit()

    def changed_reports(self, desired: Desired) -> list[tuple[int, dict[str, Any] | None]]:
        """The holder's serving reports that differ from the stored ones (read this pass); a
        deployment it runs nothing for yet (a first roll-out under way or failed) reports none."""
        with self.runtime.lock:
            running = {d.id: d for e in self.runtime.endpoints.values() for d in e.deployments.values()}
        changed = []
        for rows in desired.deployments.values():
            for row in rows:
                found = running.get(row.id)
                # through JSON: the stored report comes back with lists where the spec had tuples
                doc = None if found is None else json.loads(json.dumps(online_serving.deployment_doc(found)))
                if doc != row.serving:
                    changed.append((row.id, doc))
        return changed

    def follow(self, desired: Desired) -> None:
        """A server that does not hold the lease: each endpoint's deployments as the holder
        reports them (one it has not reported yet is not served here yet)."""
        runtime = self.runtime
        with runtime.lock:
            for row in desired.endpoints:
                state = runtime.endpoints.get((row.workspace_id, row.name))
                if state is None:
                    continue
                deployments: dict[str, DeploymentState] = {}
                for stored in desired.deployments.get(row.id, []):
                    if stored.serving is not None:
                        old = state.deployments.get(stored.name)
                        deployments[stored.name] = online_serving.followed(stored.serving, row.name, old)
                state.deployments = deployments

    def take_over(self) -> None:
        """As a restart: replicas a dead holder left on this host are ended (by the installation
        id they carry: the sandbox's --die-with-parent does not always take them along), the nodes
        made for them released; the followed view is dropped, and this pass rolls every stored
        deployment out again."""
        runtime = self.runtime
        log.info("this server holds the online lease now: it runs the replicas")
        with runtime.lock:
            for state in runtime.endpoints.values():
                state.deployments.clear()
            runtime.rolling.clear()
        online_serving.end_leftovers(runtime.installation)
        runtime.hosts.release_leftovers()

    def step_down(self) -> None:
        """Another server holds the lease now: what this one runs drains and stops (in a thread);
        the holder's report takes its place at the next pass."""
        runtime = self.runtime
        log.warning("the online lease was taken by another server: stopping this one's replicas")
        with runtime.lock:
            replicas = [
                r for e in runtime.endpoints.values() for d in e.deployments.values() for r in d.replicas
            ]
            for state in runtime.endpoints.values():
                state.deployments.clear()
            runtime.rolling.clear()
        drain = threading.Thread(target=runtime.retire, args=(replicas,), name="online-step-down")
        drain.daemon = True
        drain.start()

    def store_autoscaled(self, deployment_id: int, count: int) -> None:
        with self.sessions() as session:
            if self.fenced(session):
                online_serving.store_autoscaled(session, deployment_id, count)
                session.commit()

    def signal_demand(self, deployment_id: int, for_s: float) -> None:
        """A request this server holds for FOR_S more seconds for a deployment the holder runs."""
        with self.sessions() as session:
            online_serving.signal_demand(session, deployment_id, time.time() + for_s)
            session.commit()

    def take_demand(self, desired: Desired) -> None:
        """The holder: requests other servers hold (read this pass) count as held here until
        their bound, so autoscale starts a replica of a deployment at zero at once."""
        left = online_serving.demand_left((d for ds in desired.deployments.values() for d in ds), time.time())
        if not left:
            return
        now = time.monotonic()
        with self.runtime.lock:
            for state in self.runtime.endpoints.values():
                for deployment in state.deployments.values():
                    if deployment.id in left:
                        deployment.demand_until = max(deployment.demand_until, now + left[deployment.id])

    # --- metrics ------------------------------------------------------------------------------

    def flush_metrics(self) -> None:
        """What this worker's gateway counted since the last flush, added to each deployment's row."""
        with self.runtime.lock:
            deployments = [d for e in self.runtime.endpoints.values() for d in e.deployments.values()]
        pending = [(d, d.counted()) for d in deployments]
        pending = [(d, counted) for d, counted in pending if counted - d.flushed]
        if not pending:
            return
        with self.sessions() as session:
            for deployment, counted in pending:
                with one_item(f"flushing the metrics of {deployment.name}", session, logger=log):
                    online_metrics.add(session, deployment.id, counted - deployment.flushed)
            session.commit()
        for deployment, counted in pending:
            deployment.flushed = counted

    def metrics_of(self, session: Session, deployment: DeploymentState) -> online_metrics.Counts:
        """DEPLOYMENT's metrics: every worker's flushed (read in SESSION, the caller's: a second
        one while it writes would wait on its own write), and this worker's since. A show while
        this worker's flush commits may count that flush twice, for that instant."""
        unflushed = deployment.counted() - deployment.flushed
        return online_metrics.stored(session, deployment.id) + unflushed
