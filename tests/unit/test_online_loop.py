"""The online loop (issue 26) converges the runtime on the stored desired state, on a real store:
a generation written by anyone (another server, a worker that died before telling) is rolled out
once, an endpoint's new keys and traffic reach the gateway, a deleted deployment's replicas stop,
and the request metrics of two workers add up in the store."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.control.online_replicas import DeploymentState, OnlineRuntime, Replica
from cloudlet.domain.endpoints import online_endpoints as rules
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.core.storage import DataRoot
from cloudlet.services.endpoints import online_metrics
from cloudlet.store.schema import (
    Base,
    OnlineDeployment,
    OnlineEndpoint,
    ResourceGroup,
    Subscription,
    Workspace,
)

DEPLOYMENT: dict[str, Any] = {
    "name": "blue",
    "model": "azureml:m:1",
    "code_configuration": {"code": "codes/" + "a" * 64, "scoring_script": "score.py"},
    "instance_type": "Standard_DS3_v2",
}


class _Process:
    """A replica's process that ends when stopped, and says so."""

    def __init__(self) -> None:
        self.stopped = threading.Event()
        self.returncode: int | None = None
        self.pid = 1

    def poll(self) -> int | None:
        return 0 if self.stopped.is_set() else None

    def stop(self) -> None:
        self.stopped.set()


class _Recording(OnlineRuntime):
    """The runtime with its roll-out recorded instead of run (no replica processes here)."""

    def __init__(self, sessions: sessionmaker[Session], home: Path, full: bool = True) -> None:
        self.FULL = full
        super().__init__(sessions, DataRoot(home / "data"), home)
        self.rolled: list[tuple[str, int]] = []

    def deploy(self, endpoint: OnlineEndpoint, row: OnlineDeployment, ref: WorkspaceRef) -> None:
        self.rolling[row.id] = row.generation
        self.rolled.append((row.name, row.generation))
        spec = rules.parse_deployment(row.spec, endpoint.name, row.name)
        state = self.endpoints[(endpoint.workspace_id, endpoint.name)]
        state.deployments[row.name] = DeploymentState(row.id, row.name, spec, generation=row.generation)


@pytest.fixture
def sessions(tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    engine = create_engine(f"sqlite:///{tmp_path / 'store.db'}")
    Base.metadata.create_all(engine)
    made = sessionmaker(engine, expire_on_commit=False)
    with made() as s:
        s.add(Subscription(id="s", display_name="s"))
        s.add(ResourceGroup(id=1, subscription_id="s", name="rg", location="l"))
        s.add(Workspace(id=3, resource_group_id=1, name="ws", location="l", created_on=datetime.now(UTC)))
        s.flush()
        endpoint = OnlineEndpoint(
            workspace_id=3,
            name="ep1",
            spec=rules.parse_endpoint({"auth_mode": "key"}, "ep1").to_doc(),
            primary_key="k1",
            secondary_key="k2",
            provisioning_state="Succeeded",
            created_by="alice",
            created_on=datetime.now(UTC),
        )
        s.add(endpoint)
        s.flush()
        s.add(
            OnlineDeployment(
                endpoint_id=endpoint.id,
                name="blue",
                spec=rules.parse_deployment(DEPLOYMENT, "ep1", "blue").to_doc(),
                provisioning_state="Creating",
                stage="provisioning",
                generation=1,
                created_by="alice",
                created_on=datetime.now(UTC),
            )
        )
        s.commit()
    yield made
    engine.dispose()


def _write(sessions: sessionmaker[Session], change: Any) -> None:
    with sessions() as s:
        change(s)
        s.commit()


def _blue(s: Session) -> OnlineDeployment:
    return s.scalars(select(OnlineDeployment).where(OnlineDeployment.name == "blue")).one()


def test_a_pass_rolls_out_what_is_stored_once_and_follows_keys_and_traffic(
    sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    runtime = _Recording(sessions, tmp_path / "home")
    try:
        runtime.loop.run_pass()
        runtime.loop.run_pass()
        assert runtime.rolled == [("blue", 1)], "each stored generation is taken up once"

        def newer(s: Session) -> None:  # as another server (or a worker that died) writes it
            _blue(s).generation = 2
            endpoint = s.scalars(select(OnlineEndpoint)).one()
            endpoint.primary_key = "k3"
            endpoint.spec = {**endpoint.spec, "traffic": {"blue": 100}}

        _write(sessions, newer)
        runtime.loop.run_pass()
        assert runtime.rolled == [("blue", 1), ("blue", 2)]
        state = runtime.endpoints[(3, "ep1")]
        assert (state.primary, state.traffic) == ("k3", {"blue": 100})
        assert runtime.by_path("s", "rg", "ws", "ep1") is state
    finally:
        runtime.stop()


def test_a_deleted_deployment_and_endpoint_stop_their_replicas(
    sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    runtime = _Recording(sessions, tmp_path / "home")
    try:
        runtime.loop.run_pass()
        process = _Process()
        blue = runtime.endpoints[(3, "ep1")].deployments["blue"]
        blue.replicas = [Replica(1, process, Path("/dev/null"), ready=True)]
        _write(sessions, lambda s: s.delete(_blue(s)))
        runtime.loop.run_pass()
        assert "blue" not in runtime.endpoints[(3, "ep1")].deployments
        assert process.stopped.wait(10), "the deleted deployment's replica was stopped"
        assert not runtime.rolling

        _write(sessions, lambda s: s.delete(s.scalars(select(OnlineEndpoint)).one()))
        runtime.loop.run_pass()
        assert not runtime.endpoints and not runtime.paths
    finally:
        runtime.stop()


def test_two_workers_metrics_add_up_in_the_store(sessions: sessionmaker[Session], tmp_path: Path) -> None:
    owner = _Recording(sessions, tmp_path / "home")
    follower = _Recording(sessions, tmp_path / "home", full=False)
    try:
        owner.loop.run_pass()
        follower.loop.run_pass()
        mine = owner.endpoints[(3, "ep1")].deployments["blue"]
        follower.endpoints[(3, "ep1")].deployments["blue"] = theirs = DeploymentState(
            mine.id, "blue", mine.spec
        )
        mine.requests, mine.latency_ms = 3, 30.0
        theirs.requests, theirs.failures, theirs.latency_ms = 2, 1, 20.0
        owner.loop.run_pass()
        follower.loop.run_pass()
        mine.requests += 1  # not flushed yet: the owner's show counts it, the follower's not yet
        with sessions() as s:
            assert owner.live(s, 3, "ep1", "blue")["metrics"]["requests"] == 6
            assert follower.live(s, 3, "ep1", "blue")["metrics"] == {
                "requests": 5,
                "failures": 1,
                "in_flight": 0,
                "mean_latency_ms": 10.0,
            }
            assert online_metrics.stored(s, mine.id) == online_metrics.Counts(5, 1, 50.0)
        assert follower.rolled == [], "a follower rolls nothing out"
    finally:
        owner.stop()
        follower.stop()
