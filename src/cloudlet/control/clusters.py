"""The cluster reconciler: record what the world did, schedule, decide, then hand the work over.

One pass per cluster, under the named lease ``compute:<id>`` so one replica drives a cluster:
1. record — nodes whose agent went quiet are lost, setups that never finished failed, machines
   the provider no longer lists are lost; their runs end and their jobs are requeued
   (``node_records``, by the stuck-state table of ``domain.compute.nodes``);
2. schedule — queued jobs go onto idle nodes (priority, FIFO, backfill, all-or-nothing; where the
   pool has team shares, the fair order, team caps and preemption: ``services/jobs/fair_queue``);
   the demand leaves out the jobs a team's cap holds back;
3. decide — ``domain.compute.autoscale.decide`` over plain data (``scaling``: typed spec, quota,
   capacity, locks; low-priority ``eviction`` when dedicated demand finds no room);
4. hand over — new node rows are committed first (state ``requested``), nodes to release are
   marked ``terminating``; the provider calls then run on that provider's workers
   (``provider_work``), never on the pass, so a slow provider stalls only its own nodes. A crash
   between the two leaves a record the sweep (``sweep``) finishes.
The ephemeral pass (serverless and ``local`` jobs' nodes) runs after the clusters, with the same
recorder, leases and workers (``context.PassContext``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.control import attached_vms, ephemeral
from cloudlet.control.actions import Actions, release
from cloudlet.control.context import PassContext
from cloudlet.control.loop import LeaseCache, ReconcileLoop
from cloudlet.control.node_records import NodeRecorder
from cloudlet.control.provider_work import ProviderWork
from cloudlet.control.scaling import ClusterScaler, workspace_of
from cloudlet.control.sweep import ProviderSweep
from cloudlet.domain.compute import autoscale
from cloudlet.domain.compute.compute_types import ComputeType
from cloudlet.domain.compute.lifecycle import ProvisioningState
from cloudlet.providers.base import NodeProvider
from cloudlet.providers.capacity import CapacityReadings
from cloudlet.services.access import audit, workspaces
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.core.clock import WALL_CLOCK, Clock
from cloudlet.services.core.notify import NodeNotifier
from cloudlet.services.core.storage import DataRoot
from cloudlet.services.jobs import dispatch, job_status, prepared_specs
from cloudlet.store import db
from cloudlet.store.schema import Compute, Job

log = logging.getLogger("cloudlet.clusters")

# A burst of wake-ups (hundreds of submissions) costs one pass per interval, not one pass each:
# placement already happened inline; a pass only makes or releases nodes.
MIN_PASS_INTERVAL_S = 0.1


class ClusterReconciler(ReconcileLoop):
    def __init__(
        self,
        sessions: sessionmaker[Session],
        replica_id: str,
        installation_id: str,
        providers: Mapping[str, NodeProvider],
        notifier: NodeNotifier,
        data: DataRoot,
        server_url: Callable[[], str],
        poll_s: float = 1.0,
        lease_ttl_s: float = 10.0,
        clock: Clock = WALL_CLOCK,
        workers_per_provider: int | None = None,
    ) -> None:
        super().__init__("cluster-reconciler", poll_s, clock, min_gap_s=MIN_PASS_INTERVAL_S)
        self.sessions = sessions
        self.replica_id = replica_id
        self.installation_id = installation_id
        self.providers = providers
        self.data = data
        self.server_url = server_url
        self.leases = LeaseCache(sessions, replica_id, lease_ttl_s)
        self.recorder = NodeRecorder(started=clock.now())
        self.work = ProviderWork(providers, sessions, notifier, workers_per_provider, clock)
        readings = CapacityReadings()
        self.sweep = ProviderSweep(
            providers, sessions, installation_id, self.recorder, self.work, clock, readings
        )
        self.scaler = ClusterScaler(installation_id, server_url, readings)
        self.context = PassContext(
            sessions, replica_id, installation_id, data, server_url, self.leases, self.recorder
        )
        self._next_due = 0.0

    def pass_once(self, now: float) -> float:
        self._next_due = now + self.interval_s
        self.run_once(now)
        return max(0.0, self._next_due - self.clock.now())

    def on_stop(self) -> None:
        self.work.shutdown()

    def run_once(self, now: float) -> None:
        """One pass over every cluster and the ephemeral nodes; provider calls are queued, not made."""
        self.sweep.due(now)
        # Read without the write lock: every worker passes each interval, and one that leads no
        # cluster only tries the leases (``leases.acquire`` reads first, too).
        with db.read_only(self.sessions) as session:
            ids = list(session.scalars(_CLUSTERS))
        held = [(i, token) for i in ids if (token := self.leases.token(f"compute:{i}", now)) is not None]
        demands: dict[tuple[int, str], autoscale.Demand] = {}
        if held:
            with db.read_only(self.sessions) as session:
                demands = _demands(session)
        for compute_id, token in held:
            try:  # one cluster's failure is its own: the others still scale
                self.work.carry_out(self._reconcile(compute_id, token, now, demands))
            except Exception as exc:
                log.exception("cluster pass failed for compute %s", compute_id)
                self._record_failure(compute_id, exc)
        self.work.carry_out(ephemeral.reconcile(self.context, now))

    def _record_failure(self, compute_id: int, exc: Exception) -> None:
        """Put the failed pass on the cluster's own status (``provisioning_errors``) and in the
        audit log as an event, once per distinct error; the next successful pass clears it."""
        error = reconcile_error(exc)
        try:
            with self.sessions.begin() as session:
                compute = session.get(Compute, compute_id)
                if compute is not None and error not in (compute.errors or []):
                    compute.errors = [*without_reconcile_error(compute.errors), error]
                    ref = workspaces.ref_of(session, workspace_of(session, compute.workspace_id))
                    target = ref.compute_id(compute.name)
                    audit.record(
                        session, audit.system("autoscaler"), "compute.reconcileFailed", target, error
                    )
        except Exception:
            log.exception("could not record the failed pass of compute %s", compute_id)

    # -- record + schedule + decide, in one transaction ----------------------------------------
    def _reconcile(
        self, compute_id: int, token: int, now: float, demands: dict[tuple[int, str], autoscale.Demand]
    ) -> Actions:
        actions = Actions()
        prepared = self._prepare(compute_id)  # large attempts' run specs: built before the lock
        with self.sessions.begin() as session:
            if not self.leases.still_held(session, f"compute:{compute_id}", token):
                return actions
            compute = session.get(Compute, compute_id)
            if compute is None:
                return actions
            prepared_specs.install(session, prepared, inline=True)  # this pass must make progress
            if any(e.get("code") == RECONCILE_FAILED for e in compute.errors or []):
                compute.errors = without_reconcile_error(compute.errors)  # recovered (committed if it holds)
            nodes = node_service.live_nodes(session, compute.id, for_pass=True)
            actions.wake += self.recorder.record(session, nodes, now)
            if compute.provisioning_state == ProvisioningState.DELETING.value:
                for node in nodes:
                    release(node, actions, now)
                return actions
            actions.wake += dispatch.schedule_compute(
                session, compute, self.data, self.server_url(), full=True
            )
            if compute.type == ComputeType.VIRTUAL_MACHINE:
                attached_vms.keep_node(
                    session, compute, nodes, self.installation_id, self.server_url(), now, actions
                )
                return actions
            demand = demands.get((compute.workspace_id, compute.name), autoscale.Demand())
            demand = _less_held_back(demand, dispatch.held_back_nodes(session, compute.id))
            scaled = self.scaler.scale(session, compute, nodes, demand, now, actions)
        if scaled.next_due is not None:
            self._next_due = min(self._next_due, scaled.next_due)
        if scaled.evicted:
            self.wake.set()
        actions.deliveries = dispatch.deliveries(session)  # committed: hand them to the agents
        return actions

    def _prepare(self, compute_id: int) -> dict[prepared_specs.Key, prepared_specs.Prepared]:
        """Read without the write lock what this pass's scheduling round will place, and build
        the run specs of its large attempts there (``services/jobs/prepared_specs.py``)."""
        with prepared_specs.read_only(self.sessions) as reads:
            return dispatch.prepare_compute(reads, compute_id, self.data, self.server_url())


# Attached VMs too: their node is recorded (lost when its agent goes quiet), fed and, once lost,
# made again (``attached_vms.keep_node``); they never scale.
_CLUSTERS = select(Compute.id).where(Compute.type.in_((ComputeType.AMLCOMPUTE, ComputeType.VIRTUAL_MACHINE)))


def _less_held_back(demand: autoscale.Demand, held_back: int) -> autoscale.Demand:
    """The demand less the nodes of queued jobs that fair share holds back at their team's cap
    (this pass's round said so): no node is made for a job that may not start on it."""
    if held_back <= 0 or not demand.queued:
        return demand
    waiting = max(0, sum(demand.queued) - held_back)
    return autoscale.Demand(demand.running_nodes, (waiting,) if waiting else ())


RECONCILE_FAILED = "ReconcileFailed"


CLUSTER_FAILED = "the autoscaler could not reconcile this cluster"


def reconcile_error(exc: Exception, who: str = CLUSTER_FAILED) -> dict[str, str]:
    detail = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    message = f"{who}: {type(exc).__name__}"
    return {"code": RECONCILE_FAILED, "message": f"{message}: {detail}" if detail else message}


def without_reconcile_error(errors: list[Any] | None) -> list[Any]:
    return [e for e in errors or [] if not (isinstance(e, dict) and e.get("code") == RECONCILE_FAILED)]


def _demands(session: Session) -> dict[tuple[int, str], autoscale.Demand]:
    """Nodes every cluster's jobs need (running jobs' nodes + queued jobs' instance counts), read
    once per pass in one aggregate query, however many clusters and jobs. Placement within the pass
    moves jobs from queued to running without changing their sum."""
    # Sums of CASEs, grouped by plain columns: grouping by the expression ``status = :queued``
    # works on SQLite but not on PostgreSQL, whose select list and GROUP BY get separate bind
    # parameters and so are not the same expression (GroupingError: every pass failed there).
    queued = Job.status == job_status.QUEUED
    rows = session.execute(
        select(
            Job.workspace_id,
            Job.compute_name,
            func.coalesce(func.sum(case((queued, Job.instance_count), else_=0)), 0),
            func.coalesce(func.sum(case((queued, 0), else_=Job.instance_count)), 0),
        )
        .where(Job.status.in_(job_status.ACTIVE_VALUES), Job.compute_name.is_not(None))
        .group_by(Job.workspace_id, Job.compute_name)
    ).all()
    return {
        (workspace_id, str(name)): autoscale.Demand(
            running_nodes=int(running), queued=(int(waiting),) if waiting else ()
        )
        for workspace_id, name, waiting, running in rows
    }
