"""reconcile_store: the REAL cluster reconciler over the REAL store at scale, on a simulated provider.

Where the ``simulator`` benchmark runs the decision code on in-memory records, this one runs
``control.clusters.ClusterReconciler.run_once`` itself — record, schedule (``services.jobs.dispatch``:
placement writes run rows), decide (quota and capacity read from the store), act — against an
embedded SQLite store holding 50 clusters, 10,000 nodes and 100,000 queued jobs. The machines come
from ``sim.provider.SimulatedProvider`` (named as such: no agent processes), so "registering" is
done by writing the node rows as the agent route would.

Passes timed:
  * launch: the first pass after the queue is filled — every cluster decides to scale to its max
    and records its nodes (10,000 provider calls);
  * placement: the pass after every node registered — 10,000 jobs placed (run rows, checkpoints);
  * steady: passes with every node busy and 90,000 jobs still queued (what the loop pays every
    second while the cluster is full), p50/max over several passes.
"""

from __future__ import annotations

import resource
import shutil
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import insert, select, update

from bench import _results
from bench._server import REPO_ROOT
from bench._stats import summarize_ns
from cloudlet.control.clusters import ClusterReconciler
from cloudlet.domain.compute.compute_spec import parse_compute, spec_to_doc
from cloudlet.domain.compute.nodes import NodeState
from cloudlet.domain.compute.quota import TOTAL_DEDICATED
from cloudlet.server import open_store
from cloudlet.services.access import audit
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import quotas
from cloudlet.services.core.notify import NodeNotifier
from cloudlet.services.core.storage import DataRoot
from cloudlet.sim.clock import SimClock
from cloudlet.sim.provider import SimulatedProvider
from cloudlet.store.schema import Compute, Job, Location, Node, Workspace

NAME = "reconcile_store"
BOOTING = (NodeState.REQUESTED, NodeState.ALLOCATED, NodeState.STARTING)
SIZE = "Standard_DS1_v2"
GOAL_PASS_MS = 500.0
GOAL_RSS_MIB = 1024.0


@dataclass(frozen=True)
class Plan:
    clusters: int
    nodes_per_cluster: int
    jobs: int
    steady_passes: int

    @classmethod
    def make(cls, quick: bool) -> Plan:
        return cls(50, 200, 100_000, 3 if quick else 8)


def _setup(home: Path, plan: Plan) -> tuple[Any, str]:
    home.mkdir(parents=True, exist_ok=True)
    store = open_store(home, None)
    sessions, installation_id = store.control, store.installation_id
    now = datetime.now(UTC)
    with sessions.begin() as session:
        ws = session.scalars(select(Workspace)).one()
        location = session.get(Location, ws.location)
        assert location is not None
        location.capacity = {"vcpus": 10 * plan.clusters * plan.nodes_per_cluster, "overcommit": 1.0}
        catalogue = catalogue_service.current(session)
        size = catalogue.get(SIZE)
        assert size is not None
        sub = _subscription_of(session, ws)
        cores = 2 * plan.clusters * plan.nodes_per_cluster * size.vcpus
        for name in (size.family, TOTAL_DEDICATED):
            quotas.set_limit(session, sub, ws.location, name, cores, catalogue, audit.system("bench"))
        rows = []
        for i in range(plan.clusters):
            doc = {
                "type": "amlcompute",
                "name": f"c{i:02d}",
                "size": SIZE,
                "min_instances": 0,
                "max_instances": plan.nodes_per_cluster,
                "idle_time_before_scale_down": 600,
            }
            spec = spec_to_doc(parse_compute(doc))
            rows.append(
                {
                    "workspace_id": ws.id,
                    "name": doc["name"],
                    "type": "amlcompute",
                    "location": ws.location,
                    "size": SIZE,
                    "spec": spec,
                    "created_by": "bench",
                    "provisioning_state": "Succeeded",
                    "current_node_count": 0,
                    "errors": [],
                    "warnings": [],
                    "created_on": now,
                    "last_modified_on": now,
                }
            )
        session.execute(insert(Compute), rows)
        t0 = time.time()
        jobs = [
            {
                "workspace_id": ws.id,
                "name": f"j{i:06d}",
                "compute_name": f"c{i % plan.clusters:02d}",
                "spec": {"command": "true", "compute": f"azureml:c{i % plan.clusters:02d}"},
                "status": "Queued",
                "status_message": "waiting for nodes",
                "priority": 2,
                "instance_count": 1,
                "attempt": 0,
                "max_attempts": 3,
                "cancel_requested": False,
                "created_by": "bench",
                "submitted_at": t0 + i * 1e-6,
            }
            for i in range(plan.jobs)
        ]
        session.execute(insert(Job), jobs)
    return sessions, installation_id


def _subscription_of(session: Any, ws: Workspace) -> str:
    from cloudlet.store.schema import ResourceGroup

    rg = session.get(ResourceGroup, ws.resource_group_id)
    assert rg is not None
    return str(rg.subscription_id)


def _register_all(sessions: Any, now: float) -> int:
    """What each agent's registration does to its node row (``routes_agent.register``)."""
    with sessions.begin() as session:
        result = session.execute(
            update(Node)
            .where(
                Node.state.in_(
                    [NodeState.REQUESTED.value, NodeState.ALLOCATED.value, NodeState.STARTING.value]
                )
            )
            .values(state=NodeState.IDLE.value, registered_at=now, last_heartbeat=now, idle_since=now)
        )
        return int(result.rowcount or 0)


def _heartbeat_all(sessions: Any, now: float) -> None:
    with sessions.begin() as session:
        session.execute(update(Node).values(last_heartbeat=now))


def _timed_pass(reconciler: ClusterReconciler) -> float:
    t0 = time.perf_counter()
    reconciler.run_once(time.time())
    return time.perf_counter() - t0


def _counts(sessions: Any) -> dict[str, int]:
    with sessions() as session:
        nodes = session.execute(select(Node.state)).scalars().all()
        statuses = session.execute(select(Job.status)).scalars().all()
    out: dict[str, int] = {}
    for key in [*(f"node:{s}" for s in nodes), *(f"job:{s}" for s in statuses)]:
        out[key] = out.get(key, 0) + 1
    return out


def run(quick: bool = False) -> dict[str, Any]:
    plan = Plan.make(quick)
    data = _results.envelope(NAME, REPO_ROOT)
    data["plan"] = plan.__dict__ | {"quick": quick}
    tmp = Path(tempfile.mkdtemp(prefix="cloudlet-bench-store-"))
    try:
        t0 = time.perf_counter()
        sessions, installation_id = _setup(tmp / "home", plan)
        data["setup_s"] = round(time.perf_counter() - t0, 3)
        provider = SimulatedProvider(SimClock(), 0.0, lambda _handle, _at: None)
        reconciler = ClusterReconciler(
            sessions,
            "bench",
            installation_id,
            {"local": provider, "simulated": provider},  # type: ignore[dict-item]
            NodeNotifier(),
            DataRoot(tmp / "data"),
            lambda: "http://127.0.0.1:9",
        )
        launch_s = _timed_pass(reconciler)
        # The pass only records the nodes; their provider calls run on the provider's workers.
        t0 = time.perf_counter()
        reconciler.work.wait_idle(600)
        launch_calls_s = time.perf_counter() - t0
        registered = _register_all(sessions, time.time())
        placement_s = _timed_pass(reconciler)
        steady = []
        for _ in range(plan.steady_passes):
            _heartbeat_all(sessions, time.time())
            steady.append(_timed_pass(reconciler))
        reconciler.stop()
        counts = _counts(sessions)
        rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        worst = max([launch_s, placement_s, *steady])
        data.update(
            {
                "nodes_launched": provider.created,
                "nodes_registered": registered,
                "launch_pass_ms": round(launch_s * 1000, 1),
                "launch_calls_ms": round(launch_calls_s * 1000, 1),
                "placement_pass_ms": round(placement_s * 1000, 1),
                "steady_pass": summarize_ns([int(s * 1e9) for s in steady]),
                "jobs_placed": counts.get("job:Preparing", 0) + counts.get("job:Running", 0),
                "jobs_queued_after": counts.get("job:Queued", 0),
                "nodes_busy": counts.get(f"node:{NodeState.BUSY.value}", 0),
                "peak_rss_mib": round(rss_mib, 1),
                "goal": {
                    "pass_ms": GOAL_PASS_MS,
                    "steady_holds": bool(max(steady) * 1000 <= GOAL_PASS_MS),
                    "worst_pass_ms": round(worst * 1000, 1),
                    "worst_holds": bool(worst * 1000 <= GOAL_PASS_MS),
                    "rss_holds": bool(rss_mib <= GOAL_RSS_MIB),
                },
            }
        )
        data["loadavg_end"] = _results.loadavg()
        return data
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def markdown(data: dict[str, Any]) -> str:
    plan, goal, steady = data["plan"], data["goal"], data["steady_pass"]
    nodes = plan["clusters"] * plan["nodes_per_cluster"]
    return "\n".join(
        [
            f"## reconcile_store — the real reconciler over the real store ({data['timestamp']})",
            "",
            f"`ClusterReconciler.run_once` on embedded SQLite: {plan['clusters']} clusters × "
            f"{plan['nodes_per_cluster']} nodes = {nodes:,} nodes, {plan['jobs']:,} queued jobs; "
            "machines from the simulated provider. Setup (rows written directly) took "
            f"{data['setup_s']} s.",
            "",
            "| pass | ms | what it did |",
            "|---|---:|---|",
            f"| launch | {data['launch_pass_ms']} | recorded {data['nodes_launched']:,} nodes (the "
            f"provider calls then took {data.get('launch_calls_ms', 0)} ms on its workers) |",
            f"| placement | {data['placement_pass_ms']} | placed {data['jobs_placed']:,} jobs on "
            f"{data['nodes_registered']:,} registered nodes |",
            f"| steady p50 / max | {steady['p50_ms']:.1f} / {steady['max_ms']:.1f} | "
            f"{data['nodes_busy']:,} nodes busy, {data['jobs_queued_after']:,} jobs queued |",
            "",
            f"Peak RSS {data['peak_rss_mib']} MiB. Goal (pass ≤ {goal['pass_ms']:g} ms within 1 GB): "
            f"steady passes {'hold' if goal['steady_holds'] else 'do NOT hold'}; worst pass "
            f"{goal['worst_pass_ms']} ms "
            f"{'holds' if goal['worst_holds'] else 'does NOT hold'}; memory "
            f"{'holds' if goal['rss_holds'] else 'does NOT hold'}.",
        ]
    )


def report(data: dict[str, Any]) -> str:
    steady = data["steady_pass"]
    return (
        f"launch pass {data['launch_pass_ms']} ms ({data['nodes_launched']} nodes), placement pass "
        f"{data['placement_pass_ms']} ms ({data['jobs_placed']} jobs), steady p50 {steady['p50_ms']:.1f} ms "
        f"max {steady['max_ms']:.1f} ms, peak RSS {data['peak_rss_mib']} MiB"
    )
