"""A large attempt's run specs are built before the store's write lock is taken (issue 24,
defect 1): the cluster pass reads, builds, then writes in a short transaction that re-checks the
placement still holds. Over a real SQLite store in a tmp dir; the store's own writer flag
(``cloudlet_writer``, set by its write gate) says whether a build ran under the lock."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.control.clusters import ClusterReconciler
from cloudlet.domain.compute.nodes import NodeState
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.core.notify import NodeNotifier
from cloudlet.services.core.storage import DataRoot
from cloudlet.services.jobs import dispatch, prepared_specs, run_specs
from cloudlet.store.schema import Compute, Job, JobRun
from tests.unit.control_fakes import SIZE, FakeClock, FakeProvider, add_cluster, new_store

TF_256 = {"type": "tensorflow", "worker_count": 255, "parameter_server_count": 1}
NODES = 4
Specs = list[tuple[str, dict[str, Any]]]
URL = "http://127.0.0.1:9"


@dataclass
class Store:
    sessions: sessionmaker[Session]
    installation_id: str
    data: DataRoot
    holds_s: list[float] = field(default_factory=list)  # each write transaction's hold
    builds: list[tuple[bool, float]] = field(default_factory=list)  # (under the lock?, seconds)

    def engine(self) -> Engine:
        bind = self.sessions.kw["bind"]
        assert isinstance(bind, Engine)
        return bind


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    sessions, installation_id = new_store(tmp_path / "home")
    made = Store(sessions, installation_id, DataRoot(tmp_path / "data"))
    time_the_write_lock(made)
    monkeypatch.setattr(run_specs, "run_specs", watch_builds(made, run_specs.run_specs))
    yield made


def watch_builds(store: Store, real: Callable[..., Specs]) -> Callable[..., Specs]:
    """REAL, recording in STORE.builds whether each build ran under the write lock, and how long."""

    def watched(session: Session, *args: Any, **kwargs: Any) -> Specs:
        locked = bool(session.connection().info.get("cloudlet_writer"))
        began = time.perf_counter()
        try:
            return real(session, *args, **kwargs)
        finally:
            store.builds.append((locked, time.perf_counter() - began))

    return watched


def time_the_write_lock(store: Store) -> None:
    """Listeners after the store's write gate's: BEGIN has the writer flag; commit or rollback
    ends the hold."""

    def began(conn: Any) -> None:
        if conn.info.get("cloudlet_writer"):
            conn.info["test_hold_began"] = time.perf_counter()

    def ended(conn: Any) -> None:
        start = conn.info.pop("test_hold_began", None)
        if start is not None:
            store.holds_s.append(time.perf_counter() - start)

    event.listen(store.engine(), "begin", began)
    event.listen(store.engine(), "commit", ended)
    event.listen(store.engine(), "rollback", ended)


def _big_job_on_idle_nodes(store: Store, distribution: dict[str, Any]) -> int:
    idle_cluster(store)
    return queue_job(store, distribution)


def idle_cluster(store: Store) -> None:
    """The cluster ``big`` with NODES idle nodes."""
    add_cluster(store.sessions, "big", max_instances=NODES)
    with store.sessions.begin() as session:
        compute = session.scalars(select(Compute).where(Compute.name == "big")).one()
        size = catalogue_service.current(session).get(SIZE)
        assert size is not None
        for _ in range(NODES):
            node, _ = node_service.new_node(
                session,
                owner=compute,
                installation_id=store.installation_id,
                location="local",
                size=size,
                tier="dedicated",
                now=time.time(),
            )
            node.state, node.registered_at = NodeState.IDLE.value, time.time()


def queue_job(store: Store, distribution: dict[str, Any], name: str = "tf-256") -> int:
    """A job on all NODES of ``big``, queued."""
    with store.sessions.begin() as session:
        compute = session.scalars(select(Compute).where(Compute.name == "big")).one()
        spec = {
            "command": "python train.py",
            "compute": "azureml:big",
            "distribution": distribution,
            "resources": {"instance_count": NODES},
        }
        job = Job(
            workspace_id=compute.workspace_id,
            name=name,
            compute_name="big",
            spec=spec,
            kind="command",
            status="Queued",
            priority=2,
            instance_count=NODES,
            attempt=0,
            max_attempts=3,
            created_by="test",
            submitted_at=time.time(),
        )
        session.add(job)
        session.flush()
        return job.id


def _runs(store: Store, job_id: int) -> int:
    with store.sessions() as session:
        return int(session.scalar(select(func.count()).where(JobRun.job_id == job_id)) or 0)


def reconciler_of(store: Store) -> ClusterReconciler:
    return ClusterReconciler(
        store.sessions,
        "replica-1",
        store.installation_id,
        {"local": FakeProvider()},
        NodeNotifier(),
        store.data,
        lambda: URL,
        clock=FakeClock(time.time()),
    )


@pytest.mark.parametrize(
    ("distribution", "processes"),
    [(TF_256, 256), ({"type": "pytorch", "process_count_per_instance": 256}, 1024)],
)
def test_the_cluster_pass_builds_a_large_attempt_before_it_takes_the_write_lock(
    store: Store, distribution: dict[str, Any], processes: int
) -> None:
    job_id = _big_job_on_idle_nodes(store, distribution)
    reconciler = reconciler_of(store)
    try:
        store.holds_s.clear()
        reconciler.run_once(time.time())
    finally:
        reconciler.stop()
    assert _runs(store, job_id) == processes  # placed, every process
    assert store.builds, "no run specs were built"
    assert [locked for locked, _ in store.builds] == [False], store.builds  # once, outside the lock
    with store.sessions() as session:
        job = session.get(Job, job_id)
        assert job is not None and job.status == "Preparing" and job.attempt == 1


def test_a_transaction_that_may_not_build_leaves_a_large_attempt_queued(store: Store) -> None:
    """The dispatch batcher's and the agents' transactions: nothing written, the cluster pass woken."""
    job_id = _big_job_on_idle_nodes(store, TF_256)
    with store.sessions.begin() as session:
        compute = session.scalars(select(Compute).where(Compute.name == "big")).one()
        assert dispatch.schedule_compute(session, compute, store.data, URL) == []
        assert prepared_specs.wanted(session)
    assert _runs(store, job_id) == 0 and store.builds == []
    with store.sessions() as session:
        job = session.get(Job, job_id)
        assert job is not None and job.status == "Queued" and job.attempt == 0


def test_specs_prepared_for_a_state_that_moved_are_not_written(store: Store) -> None:
    job_id = _big_job_on_idle_nodes(store, TF_256)
    with prepared_specs.read_only(store.sessions) as reads:
        compute = reads.scalars(select(Compute).where(Compute.name == "big")).one()
        prepared = dispatch.prepare_compute(reads, compute.id, store.data, URL)
    assert [key[:2] for key in prepared] == [(job_id, 1)]
    with store.sessions.begin() as session:  # meanwhile an attempt started and was requeued
        session.execute(update(Job).where(Job.id == job_id).values(attempt=1))
    with store.sessions.begin() as session:
        prepared_specs.install(session, prepared, inline=False)
        compute = session.scalars(select(Compute).where(Compute.name == "big")).one()
        assert dispatch.schedule_compute(session, compute, store.data, URL) == []
        assert prepared_specs.wanted(session)  # left for a fresh preparation
    assert _runs(store, job_id) == 0
