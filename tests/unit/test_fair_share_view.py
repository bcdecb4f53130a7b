"""The pool view (``services/views/fair_share.pool_view``, issue 31) on a real migrated SQLite store:
its figures are the domain's (entitlements, borrowed, factors) over the store's teams and jobs, and
what it costs on a deep queue."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.domain.access.teams import TeamDocument
from cloudlet.domain.jobs.run_state import RunState
from cloudlet.services.access import identity, teams
from cloudlet.services.core.context import Caller
from cloudlet.services.jobs import fair_usage
from cloudlet.services.views import fair_share as view
from cloudlet.store.schema import Compute, Job, JobRun
from tests.unit.control_fakes import add_cluster, new_store

ADMIN = Caller(principal_id=0, name="root", is_admin=True)
POOL = {"workspace": "default", "compute": "c1"}


@pytest.fixture
def sessions(tmp_path: Path) -> sessionmaker[Session]:
    fair_usage.forget()  # the process's kept usage is per compute id, which each new store reuses
    made, _ = new_store(tmp_path / "home")
    with made.begin() as session:
        for user in ("alice", "bob", "carol"):
            identity.create_principal(session, user, "test")
    return made


def put(sessions: sessionmaker[Session], name: str, **doc: Any) -> None:
    with sessions() as session:
        teams.put_team(session, ADMIN, name, TeamDocument.model_validate(doc))


def pool_of(sessions: sessionmaker[Session], now: float) -> dict[str, Any] | None:
    with sessions() as session:
        compute = session.scalars(select(Compute).where(Compute.name == "c1")).one()
        return view.pool_view(session, compute, now)


def jobs_of(sessions: sessionmaker[Session], owners: dict[str, str], running: set[str], start: float) -> None:
    """Give the cluster's queued jobs their users (OWNERS: job name → user) and start RUNNING (a
    live run each, on a node of its own, since START)."""
    with sessions.begin() as session:
        for name, user in owners.items():
            values: dict[str, Any] = {"created_by": user}
            if name in running:
                values |= {"status": "Running", "started_at": start}
            session.execute(update(Job).where(Job.name == name).values(**values))
        ids = session.execute(select(Job.id, Job.name).where(Job.name.in_(running)))
        session.add_all(
            JobRun(
                id=f"run-{name}",
                job_id=job_id,
                attempt=0,
                rank=0,
                node_id=f"node-{name}",
                state=RunState.RUNNING.value,
                spec={},
                assigned_at=start,
                started_at=start,
            )
            for job_id, name in ids
        )


def test_no_share_no_view(sessions: sessionmaker[Session]) -> None:
    add_cluster(sessions, "c1")
    assert pool_of(sessions, time.time()) is None


def test_the_pools_figures_per_team(sessions: sessionmaker[Session]) -> None:
    add_cluster(sessions, "c1", max_instances=4, queued_jobs=6)
    put(sessions, "ta", members=["alice"], shares=[POOL | {"share": 3}])
    put(sessions, "tb", members=["bob"], shares=[POOL | {"share": 1, "borrow_limit": 0}])
    now = time.time()
    # alice runs three one-node jobs for an hour (one node: 1 vCPU, Standard_DS1_v2), bob queues two;
    # carol (in no team) queues one: the default team appears, weighted as the mean (2).
    owners = {"c1-j0": "alice", "c1-j1": "alice", "c1-j2": "alice", "c1-j3": "bob", "c1-j4": "bob"}
    owners["c1-j5"] = "carol"
    jobs_of(sessions, owners, {"c1-j0", "c1-j1", "c1-j2"}, now - 3600)
    shown = pool_of(sessions, now)
    assert shown is not None and shown["capacity_cores"] == 4
    rows = {t["team"]: t for t in shown["teams"]}
    assert set(rows) == {"ta", "tb", "default"}
    ta, tb, default = rows["ta"], rows["tb"], rows["default"]
    assert (ta["share_percent"], tb["share_percent"], default["share_percent"]) == (50.0, 16.7, 33.3)
    assert ta["entitlement_cores"] == 2.0 and ta["held_cores"] == 3 and ta["borrowed_cores"] == 1
    assert tb["borrow_limit"] == 0 and tb["queued_jobs"] == 2 and default["queued_jobs"] == 1
    assert ta["usage_core_hours"] == pytest.approx(3.0, rel=0.01)  # 3 cores × 1 h, barely decayed
    assert ta["usage_percent"] == 100.0 and ta["factor"] == pytest.approx(2**-2, rel=1e-3)
    assert tb["factor"] == default["factor"] == 1.0


def test_cost_on_a_deep_queue(sessions: sessionmaker[Session]) -> None:
    """10,000 queued jobs over 20 users in 20 teams: the view is read in well under a second."""
    add_cluster(sessions, "c1", max_instances=100, queued_jobs=10_000)
    users = [f"u{i}" for i in range(20)]
    with sessions.begin() as session:
        for user in users:
            identity.create_principal(session, user, "test")
    for i, user in enumerate(users):
        put(sessions, f"t{i}", members=[user], shares=[POOL | {"share": 1 + i % 3}])
    owners = {f"c1-j{i}": users[i % 20] for i in range(10_000)}
    jobs_of(sessions, owners, {f"c1-j{i}" for i in range(100)}, time.time() - 600)
    best = float("inf")
    for _ in range(3):
        began = time.perf_counter()
        shown = pool_of(sessions, time.time())
        best = min(best, time.perf_counter() - began)
    assert shown is not None and len(shown["teams"]) == 20
    assert sum(t["queued_jobs"] for t in shown["teams"]) == 9_900
    print(f"\npool view, 10,000 jobs / 20 teams: {best * 1000:.0f} ms")
    assert best < 2.0


def test_finished_runs_count_as_the_scheduler_counts_them(sessions: sessionmaker[Session]) -> None:
    """Usage is ``fair_usage``'s: a run that ended an hour ago still counts, decayed."""
    add_cluster(sessions, "c1", max_instances=4, queued_jobs=1)
    put(sessions, "ta", members=["alice"], shares=[POOL | {"share": 1}])
    put(sessions, "tb", members=["bob"], shares=[POOL | {"share": 1}])
    now = time.time()
    jobs_of(sessions, {"c1-j0": "bob"}, {"c1-j0"}, now - 7200)
    with sessions.begin() as session:
        session.execute(update(Job).values(status="Completed", ended_at=now - 3600))
        session.execute(update(JobRun).values(state=RunState.EXITED.value, ended_at=now - 3600))
    shown = pool_of(sessions, now)
    assert shown is not None
    rows = {t["team"]: t for t in shown["teams"]}
    assert rows["tb"]["held_cores"] == 0 and rows["tb"]["usage_core_hours"] == pytest.approx(1.0, rel=0.01)
    assert rows["tb"]["usage_percent"] == 100.0 and rows["ta"]["factor"] == 1.0
