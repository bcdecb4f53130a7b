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
  (``services/online_metrics.py``).

Writes wake it (``services/online_endpoints`` records the effect, the request's commit
publishes it: ``services/effects.py``);
it also passes every ``INTERVAL_S``, so a wake-up lost (another worker's, another server's write)
costs at most that. Under ``--workers N`` worker 0 runs it in full; the others keep only their
gateway's keys and traffic and their metrics (``control/online_shared.py``) and pass a wake-up on
to worker 0.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.control.loop import ReconcileLoop, one_item
from cloudlet.services import online_metrics, workspaces
from cloudlet.services.context import WorkspaceRef
from cloudlet.store.schema import OnlineDeployment, OnlineEndpoint, Workspace

if TYPE_CHECKING:
    from cloudlet.control.online_replicas import DeploymentState, OnlineRuntime

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
    """RUNTIME converged on the store. FULL: this worker runs the replicas (a server alone, or
    worker 0 of several); otherwise it keeps only its gateway's view of keys and traffic."""

    def __init__(
        self,
        runtime: OnlineRuntime,
        sessions: sessionmaker[Session],
        full: bool = True,
        interval_s: float = INTERVAL_S,
    ) -> None:
        super().__init__("online-loop", interval_s)
        self.runtime, self.sessions, self.full = runtime, sessions, full
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
            with self.sessions() as session:
                desired = Desired.read(session)
                self.converge(desired)
        finally:
            with self._converged:
                self._done = mine
                self._converged.notify_all()
        if self.full and (self._watching is None or not self._watching.is_alive()):
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
                if not self.full:
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
        if gone and self.full:
            replicas = [r for d in gone for r in d.replicas]
            drain = threading.Thread(target=runtime._retire, args=(replicas,), name="online-drain")
            drain.daemon = True
            drain.start()

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
