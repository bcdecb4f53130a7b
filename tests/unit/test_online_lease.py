"""The online loop's lease (issue 26), on a real store: of two servers, the lease holder rolls the
stored deployments out and reports where their replicas are; the other rolls nothing out and its
gateway routes to the holder's replicas; when the holder's lease lapses the other takes over and
rolls everything out again, starting an autoscaled deployment from its stored count."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.control import online_serving
from cloudlet.control.online_replicas import DeploymentState, OnlineRuntime, Replica
from cloudlet.control.online_serving import Change, change
from cloudlet.domain.endpoints import online_autoscale as policy
from cloudlet.domain.endpoints import online_endpoints as rules
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.core.storage import DataRoot
from cloudlet.store.schema import Lease, OnlineDeployment, OnlineEndpoint
from tests.unit.test_online_loop import _Process, sessions

__all__ = ["sessions"]  # the store fixture, shared with the online loop's tests


class _Server(OnlineRuntime):
    """One server's runtime: a roll-out starts one recorded replica on a port of its own."""

    def __init__(self, sessions: sessionmaker[Session], home: Path, replica_id: str, port: int) -> None:
        super().__init__(sessions, DataRoot(home / "data"), home, replica_id=replica_id, lease_ttl_s=30)
        self.port = port
        self.rolled: list[tuple[str, int, int]] = []  # (deployment, generation, replicas started)

    def deploy(self, endpoint: OnlineEndpoint, row: OnlineDeployment, ref: WorkspaceRef) -> None:
        self.rolling[row.id] = row.generation
        spec = rules.parse_deployment(row.spec, endpoint.name, row.name)
        count = policy.first_count(spec.scale_settings, spec.instance_count, row.autoscaled_instances)
        self.rolled.append((row.name, row.generation, count))
        replicas = [Replica(self.port, _Process(), Path("/dev/null"), ready=True)]
        state = self.endpoints[(endpoint.workspace_id, endpoint.name)]
        state.deployments[row.name] = DeploymentState(
            row.id, row.name, spec, generation=row.generation, replicas=replicas
        )


@pytest.mark.parametrize(
    ("leading", "holds", "expected"),
    [
        (False, True, Change.TAKE_OVER),
        (True, False, Change.STEP_DOWN),
        (True, True, None),
        (False, False, None),
    ],
)
def test_the_lease_decision(leading: bool, holds: bool, expected: Change | None) -> None:
    assert change(leading, holds) is expected


def test_autoscale_resumes_from_the_stored_count_within_the_bounds() -> None:
    settings = policy.parse({"type": "target_utilization", "min_instances": 0, "max_instances": 3}, 1)
    assert policy.first_count(settings, 1, None) == 1, "nothing stored: instance_count"
    assert policy.first_count(settings, 1, 0) == 0, "scaled to zero stays at zero"
    assert policy.first_count(settings, 1, 5) == 3, "an update lowered max_instances"
    assert policy.first_count(None, 2, 3) == 2, "no autoscale: instance_count"


def test_one_server_runs_the_replicas_the_other_routes_to_them_and_takes_over(
    sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    a = _Server(sessions, tmp_path / "a", "replica-a", 7001)
    b = _Server(sessions, tmp_path / "b", "replica-b", 7002)
    try:
        a.loop.run_pass()
        a.loop.run_pass()  # the report of what the first pass started
        b.loop.run_pass()
        assert (a.loop.leading, b.loop.leading) == (True, False)
        assert a.rolled == [("blue", 1, 1)] and b.rolled == []
        with sessions() as s:
            stored = s.scalars(select(OnlineDeployment)).one().serving
        assert stored is not None and stored["replicas"] == [
            {"host": "127.0.0.1", "port": 7001, "ready": True, "node": None}
        ]
        followed = b.endpoints[(3, "ep1")].deployments["blue"]
        assert [(r.url, r.ready) for r in followed.replicas] == [("http://127.0.0.1:7001", True)]
        assert followed.pick() is not None, "the other server's gateway routes to the holder's replica"

        # autoscale's count, stored by the holder, is where a new holder starts
        a.loop.store_autoscaled(followed.id, 2)
        with sessions() as s:  # the holder dies: its lease lapses
            s.execute(update(Lease).where(Lease.name == online_serving.LEASE).values(expires_at=0))
            s.commit()
        b.loop._next_try = 0.0
        b.loop.run_pass()
        b.loop.run_pass()
        assert b.loop.leading and b.rolled == [("blue", 1, 1)], "instance_count 1, no autoscale"
        with sessions() as s:
            stored = s.scalars(select(OnlineDeployment)).one().serving
        assert stored is not None and [r["port"] for r in stored["replicas"]] == [7002]

        # the old holder, paused past its TTL, writes nothing once it has anything to report
        mine = a.endpoints[(3, "ep1")].deployments["blue"]
        old = mine.replicas[0]
        mine.replicas[0].ready = False
        a.loop.run_pass()
        assert not a.loop.leading, "its fenced write failed: it stepped down"
        assert old.proc.stopped.wait(10), "its replica was stopped"  # type: ignore[attr-defined]
        with sessions() as s:
            stored = s.scalars(select(OnlineDeployment)).one().serving
        assert stored is not None and [r["port"] for r in stored["replicas"]] == [7002]
        a.loop.run_pass()  # now it follows b's report
        assert [r.port for r in a.endpoints[(3, "ep1")].deployments["blue"].replicas] == [7002]
    finally:
        a.stop()
        b.stop()


def test_the_roll_out_of_a_holder_that_lost_the_lease_reports_nothing(
    sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    """A holder paused past its TTL in the middle of a roll-out: the new holder's take-over ends
    its replicas and rolls the generation out again. The old roll-out's "Failed" (its replicas
    were killed) must not overwrite the new one's progress: unfenced, the deployment read Failed
    while it was being rolled out (test_online_lease, under load)."""
    a = _Server(sessions, tmp_path / "a", "replica-a", 7001)
    b = _Server(sessions, tmp_path / "b", "replica-b", 7002)
    try:
        a.loop.run_pass()
        with sessions() as s:  # the holder pauses: its lease lapses and the other takes it
            s.execute(update(Lease).where(Lease.name == online_serving.LEASE).values(expires_at=0))
            s.commit()
        b.loop.run_pass()
        assert b.loop.leading and a.loop.leading, "a has not looked since"
        with sessions() as s:
            row = s.scalars(select(OnlineDeployment)).one()
            deployment, generation = row.id, row.generation
        b._report(deployment, generation, "server_start", "Updating", None)  # the new roll-out
        a._report(deployment, generation, "server_start", "Failed", "the inference server exited (-9)")
        assert not a.loop.leading, "its fenced write failed: it stepped down"
        with sessions() as s:
            row = s.scalars(select(OnlineDeployment)).one()
            assert (row.stage, row.provisioning_state, row.reason) == ("server_start", "Updating", None)
    finally:
        a.stop()
        b.stop()
