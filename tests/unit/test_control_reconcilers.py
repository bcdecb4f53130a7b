"""The cluster reconciler's parts, built with a fake clock and fake providers over a real SQLite
store in a tmp dir: a slow provider stalls no other cluster, eviction order, adopt-or-fail after a
crash, vanished machines, the stuck-state table applied (lost, failed setup, bounded retries)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.control.actions import Actions
from cloudlet.control.clusters import ClusterReconciler
from cloudlet.control.eviction import evict_low_priority
from cloudlet.control.sweep import TERMINATE_FAILED
from cloudlet.domain.compute.nodes import (
    LAUNCH_RECORD_TIMEOUT_S,
    LOST_AFTER_S,
    START_TIMEOUT_S,
    TERMINATE_MAX_RETRIES,
    TERMINATE_RETRY_S,
    NodeEvent,
    NodeState,
)
from cloudlet.providers.base import Capacity, NodeHandle, NodeProvider, ProviderError
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.core.notify import NodeNotifier
from cloudlet.services.core.storage import DataRoot
from cloudlet.store.schema import AuditEntry, Compute, Node
from tests.unit.control_fakes import SIZE, FakeClock, FakeProvider, add_cluster, new_store


class World:
    def __init__(self, tmp: Path, providers: dict[str, FakeProvider]) -> None:
        self.sessions, self.installation_id = new_store(tmp / "home")
        self.clock = FakeClock()
        self.providers = providers
        typed: dict[str, NodeProvider] = dict(providers)
        self.data = DataRoot(tmp / "data")
        self.reconciler = ClusterReconciler(
            self.sessions,
            "replica-1",
            self.installation_id,
            typed,
            NodeNotifier(),
            self.data,
            lambda: "http://127.0.0.1:9",
            clock=self.clock,
        )
        add_cluster(self.sessions, "pool", max_instances=1)  # owns the nodes tests record by hand

    def nodes(self, compute: str) -> list[Node]:
        with self.sessions() as session:
            compute_id = session.scalar(select(Compute.id).where(Compute.name == compute))
            assert compute_id is not None
            query = select(Node).where(node_service.owned_by_compute(compute_id)).order_by(Node.created_at)
            return list(session.scalars(query))

    def node(self, node_id: str) -> Node:
        with self.sessions() as session:
            node = session.get(Node, node_id)
            assert node is not None
            return node

    def record_node(self, session: Session, compute: str = "pool", **columns: object) -> Node:
        """A node of cluster COMPUTE (by default the jobless cluster ``pool``)."""
        size = catalogue_service.current(session).get(SIZE)
        assert size is not None
        owner = session.scalars(select(Compute).where(Compute.name == compute)).one()
        node, _ = node_service.new_node(
            session,
            owner=owner,
            installation_id=self.installation_id,
            location="local",
            size=size,
            tier=str(columns.pop("tier", "dedicated")),
            now=self.clock.now(),
        )
        for column, value in columns.items():
            setattr(node, column, value)
        return node


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(tmp_path, {"local": FakeProvider()})
    yield made
    made.reconciler.stop()


def _register_all(sessions: sessionmaker[Session], now: float) -> None:
    with sessions.begin() as session:
        session.execute(
            update(Node)
            .where(Node.state == NodeState.STARTING.value)
            .values(state=NodeState.IDLE.value, state_since=now, registered_at=now, last_heartbeat=now)
        )


# -- launch and terminate off the pass ----------------------------------------------------------
def test_a_slow_provider_does_not_stall_another_cluster(tmp_path: Path) -> None:
    gate = threading.Event()  # the slow provider's every launch blocks until this opens (or 5 s)
    slow, fast = FakeProvider(gate, block_s=5.0), FakeProvider()
    world = World(tmp_path, {"local": fast, "slowland": slow})
    try:
        add_cluster(world.sessions, "stuck", location="slowland", max_instances=3, queued_jobs=3)
        add_cluster(world.sessions, "quick", location="local", max_instances=2, queued_jobs=2)
        began = time.monotonic()
        world.reconciler.run_once(world.clock.now())
        assert time.monotonic() - began < 2.0, "the pass waited on a provider"
        # The fast cluster's machines exist while every slow launch is still blocked.
        assert fast.wait_created(2, timeout_s=3.0)
        assert world.reconciler.work.wait_idle(3.0, provider="local")
        assert not gate.is_set() and slow.machines == {}
        world.clock.advance(1)
        world.reconciler.run_once(world.clock.now())
        quick = world.nodes("quick")
        assert [n.state for n in quick] == [NodeState.STARTING.value] * 2
        assert all(n.provider_ref for n in quick)
        assert [n.state for n in world.nodes("stuck")] == [NodeState.REQUESTED.value] * 3
        gate.set()
        assert world.reconciler.work.wait_idle(10)
        assert [n.state for n in world.nodes("stuck")] == [NodeState.STARTING.value] * 3
    finally:
        gate.set()
        world.reconciler.stop()


def test_a_queued_launch_is_not_taken_for_an_interrupted_one(tmp_path: Path) -> None:
    gate = threading.Event()
    slow = FakeProvider(gate, block_s=5.0)
    world = World(tmp_path, {"local": FakeProvider(), "slowland": slow})
    try:
        add_cluster(world.sessions, "stuck", location="slowland", max_instances=1, queued_jobs=1)
        world.reconciler.run_once(world.clock.now())
        [node] = world.nodes("stuck")
        world.clock.advance(LAUNCH_RECORD_TIMEOUT_S + 1)
        world.reconciler.sweep.adopt_or_fail("slowland", [], world.clock.now())
        assert world.node(node.id).state == NodeState.REQUESTED.value  # still being launched here
        gate.set()
        assert world.reconciler.work.wait_idle(10)
        assert world.node(node.id).state == NodeState.STARTING.value
    finally:
        gate.set()
        world.reconciler.stop()


class EngineProvider(FakeProvider):
    """A fake engine that owns its capacity (as Slurm or a Kubernetes quota would): OFFER vCPUs,
    or it cannot say (None)."""

    def __init__(self, offer: float | None) -> None:
        super().__init__()
        self.offer = offer

    def capacity(self) -> Capacity:
        if self.offer is None:
            raise ProviderError("sinfo timed out")
        return Capacity(vcpus=self.offer, memory_gb=1024)


def test_an_engine_that_owns_its_capacity_bounds_the_cluster(tmp_path: Path) -> None:
    engine = EngineProvider(offer=2)  # the location stores 64 vCPUs; the engine gives 2
    world = World(tmp_path, {"local": FakeProvider(), "slowland": engine})
    try:
        add_cluster(world.sessions, "hpc", location="slowland", max_instances=6, queued_jobs=6)
        world.reconciler.sweep.sweep("slowland")  # what the sweep's worker does every couple of s
        world.reconciler.run_once(world.clock.now())
        assert len(world.nodes("hpc")) == 2  # Standard_DS1_v2: 1 vCPU each
        engine.offer = None  # the engine cannot say: the stored capacity stands in, with a note
        assert world.reconciler.work.wait_idle(5)
        world.reconciler.sweep.sweep("slowland")
        world.clock.advance(1)
        world.reconciler.run_once(world.clock.now())
        assert len(world.nodes("hpc")) == 6
    finally:
        world.reconciler.stop()


# -- eviction -----------------------------------------------------------------------------------
def test_eviction_frees_what_is_needed_and_no_more(world: World) -> None:
    with world.sessions.begin() as session:
        idle = world.record_node(session, tier="low_priority", state=NodeState.IDLE.value)
        busy = world.record_node(session, tier="low_priority", state=NodeState.BUSY.value)
        vcpus = idle.vcpus
    actions = Actions()
    with world.sessions.begin() as session:
        freed = evict_low_priority(session, "local", "dedicated-c", vcpus, actions, world.clock.now())
    assert freed == vcpus
    assert world.node(idle.id).state == NodeState.PREEMPTED.value
    assert world.node(busy.id).state == NodeState.BUSY.value
    assert [t[0] for t in actions.terminations] == [idle.id]


# -- after a crash: requested nodes are adopted or end ------------------------------------------
def test_requested_nodes_are_adopted_if_made_else_they_end(world: World) -> None:
    with world.sessions.begin() as session:
        made = world.record_node(session)
        never = world.record_node(session)
    world.providers["local"].machines[made.id] = NodeHandle(made.id, {"fake": True})
    world.clock.advance(LAUNCH_RECORD_TIMEOUT_S + 1)
    with world.sessions.begin() as session:
        fresh_id = world.record_node(session).id  # requested just now: its launch may be on its way
    world.reconciler.sweep.sweep("local")
    adopted, ended, fresh = world.node(made.id), world.node(never.id), world.node(fresh_id)
    assert (adopted.state, adopted.provider_ref) == (NodeState.STARTING.value, {"fake": True})
    assert adopted.state_since == world.clock.now()
    assert ended.state == NodeState.TERMINATED.value and ended.error is not None
    assert ended.error["code"] == "LaunchInterrupted"
    assert fresh.state == NodeState.REQUESTED.value


def test_an_orphan_machine_is_terminated(world: World) -> None:
    provider = world.providers["local"]
    provider.machines["n-unknown"] = NodeHandle("n-unknown", {"fake": True})
    world.reconciler.sweep.sweep("local")
    assert provider.terminate_calls == ["n-unknown"] and provider.machines == {}


# -- vanished machines and quiet agents ---------------------------------------------------------
def test_a_vanished_machine_makes_its_node_lost(world: World) -> None:
    add_cluster(world.sessions, "cl", max_instances=1, queued_jobs=1)
    world.reconciler.run_once(world.clock.now())
    assert world.reconciler.work.wait_idle(5)
    _register_all(world.sessions, world.clock.now())
    [node] = world.nodes("cl")
    world.providers["local"].machines.clear()  # the machine died behind our back
    world.clock.advance(3)
    world.reconciler.sweep.sweep("local")
    world.reconciler.run_once(world.clock.now())
    lost = world.node(node.id)
    assert lost.state == NodeState.LOST.value and lost.error is not None
    assert lost.error["message"] == "the node's machine is gone"


def test_quiet_agents_are_lost_and_unregistered_ones_fail_setup(world: World) -> None:
    add_cluster(world.sessions, "cl", max_instances=2, queued_jobs=2)
    world.reconciler.run_once(world.clock.now())
    assert world.reconciler.work.wait_idle(5)
    first, second = world.nodes("cl")
    now = world.clock.now()
    with world.sessions.begin() as session:  # one registers; the other never does
        session.execute(
            update(Node)
            .where(Node.id == first.id)
            .values(state=NodeState.IDLE.value, state_since=now, registered_at=now, last_heartbeat=now)
        )
    world.clock.advance(LOST_AFTER_S + 1)
    world.reconciler.run_once(world.clock.now())
    assert world.node(first.id).state == NodeState.LOST.value
    assert world.node(second.id).state == NodeState.STARTING.value  # its own limit is longer
    world.clock.advance(START_TIMEOUT_S)
    world.reconciler.run_once(world.clock.now())
    failed = world.node(second.id)
    assert failed.state == NodeState.SETUP_FAILED.value and failed.error is not None
    assert failed.error["code"] == "NodeSetupFailed"


def test_a_restarted_control_plane_gives_agents_time_to_find_it(world: World) -> None:
    with world.sessions.begin() as session:
        node = world.record_node(session)
        node_service.advance(node, NodeEvent.ALLOCATE, world.clock.now())
        node_service.advance(node, NodeEvent.BOOT, world.clock.now())
        node_service.advance(node, NodeEvent.REGISTER, world.clock.now())
        node.last_heartbeat = world.clock.now() - 3600  # silent for an hour: the server was down
        node_id = node.id
    with world.sessions.begin() as session:
        [row] = list(session.scalars(select(Node).where(Node.id == node_id)))
        assert world.reconciler.recorder.record(session, [row], world.clock.now() + 1) == []
        assert row.state == NodeState.IDLE.value


# -- terminations that keep failing -------------------------------------------------------------
def test_a_termination_is_retried_a_bounded_number_of_times_then_reported(world: World) -> None:
    provider = world.providers["local"]
    provider.refuse_terminate = True
    with world.sessions.begin() as session:
        node = world.record_node(session, provider_ref={"fake": True})
        node_service.advance(node, NodeEvent.TERMINATE, world.clock.now())
        node_id = node.id
    provider.machines[node_id] = NodeHandle(node_id, {"fake": True})
    for _ in range(TERMINATE_MAX_RETRIES):
        world.clock.advance(TERMINATE_RETRY_S)
        world.reconciler.sweep.sweep("local")
        assert world.reconciler.work.wait_idle(5)
    tries = len(provider.terminate_calls)
    assert tries == TERMINATE_MAX_RETRIES
    assert world.node(node_id).error is None
    world.clock.advance(TERMINATE_RETRY_S)
    world.reconciler.sweep.sweep("local")  # past the limit: given up, reported
    assert world.reconciler.work.wait_idle(5)
    given_up = world.node(node_id)
    assert given_up.state == NodeState.TERMINATING.value and given_up.error is not None
    assert given_up.error["code"] == TERMINATE_FAILED
    world.clock.advance(TERMINATE_RETRY_S)
    world.reconciler.sweep.sweep("local")
    assert world.reconciler.work.wait_idle(5)
    assert len(provider.terminate_calls) == tries  # no more retries
    with world.sessions() as session:
        actions = list(session.scalars(select(AuditEntry.action)))
    assert actions.count("node.terminateFailed") == 1
