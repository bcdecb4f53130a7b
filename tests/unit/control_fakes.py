"""Fakes for building reconcilers in unit tests: a clock that moves only when told, a provider
that keeps its machines in a dict (optionally slow or refusing), and a real store in a tmp dir."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.domain.compute.compute_spec import parse_compute, spec_to_doc
from cloudlet.domain.compute.quota import TOTAL_DEDICATED, TOTAL_LOW_PRIORITY
from cloudlet.providers.base import NodeHandle, NodeRequest, ProviderError
from cloudlet.server import open_store
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import quotas
from cloudlet.store.schema import Compute, Job, Location, ResourceGroup, Workspace

SIZE = "Standard_DS1_v2"
START = 1_000_000.0


class FakeClock:
    def __init__(self, start: float = START) -> None:
        self.t = start

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class FakeProvider:
    """Machines in a dict. ``gate``: each create waits on it (at most ``block_s``), a slow provider.
    ``refuse_terminate``: every terminate raises, a provider that cannot let go."""

    kind = "fake"

    def __init__(self, gate: threading.Event | None = None, block_s: float = 5.0) -> None:
        self.gate = gate
        self.block_s = block_s
        self.refuse_terminate = False
        self.machines: dict[str, NodeHandle] = {}
        self.terminate_calls: list[str] = []
        self.cond = threading.Condition()

    def create(self, req: NodeRequest) -> NodeHandle:
        if self.gate is not None:
            self.gate.wait(self.block_s)
        handle = NodeHandle(req.node_id, {"fake": True})
        with self.cond:
            self.machines[req.node_id] = handle
            self.cond.notify_all()
        return handle

    def terminate(self, handle: NodeHandle) -> None:
        with self.cond:
            self.terminate_calls.append(handle.node_id)
            if self.refuse_terminate:
                raise ProviderError("the provider will not let go")
            self.machines.pop(handle.node_id, None)

    def list_nodes(self, installation_id: str) -> list[NodeHandle]:
        with self.cond:
            return list(self.machines.values())

    def wait_created(self, count: int, timeout_s: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: len(self.machines) >= count, timeout_s)


def new_store(home: Path, db_url: str | None = None) -> tuple[sessionmaker[Session], str]:
    """A migrated, bootstrapped store (SQLite; DB_URL: that database) with room and quota for the
    tests' clusters."""
    home.mkdir(parents=True, exist_ok=True)
    store = open_store(home, db_url)
    with store.control.begin() as session:
        ws = session.scalars(select(Workspace)).one()
        rg = session.get(ResourceGroup, ws.resource_group_id)
        assert rg is not None
        session.add(Location(name="slowland", provider="local", capacity={"vcpus": 64, "overcommit": 1.0}))
        catalogue = catalogue_service.current(session)
        size = catalogue.get(SIZE)
        assert size is not None
        for location in ("local", "slowland"):
            for name in (size.family, TOTAL_DEDICATED, TOTAL_LOW_PRIORITY):
                quotas.set_limit(session, rg.subscription_id, location, name, 1000, catalogue, "test")
    return store.control, store.installation_id


def add_cluster(
    sessions: sessionmaker[Session],
    name: str,
    *,
    location: str = "local",
    max_instances: int = 2,
    queued_jobs: int = 0,
    tier: str = "dedicated",
    submitted_at: float = START,
) -> int:
    """A cluster row (as the create operation leaves it) and QUEUED_JOBS one-node jobs for it."""
    now = datetime.now(UTC)
    doc: dict[str, Any] = {
        "type": "amlcompute",
        "name": name,
        "size": SIZE,
        "min_instances": 0,
        "max_instances": max_instances,
        "idle_time_before_scale_down": 600,
        "tier": tier,
    }
    with sessions.begin() as session:
        ws = session.scalars(select(Workspace)).one()
        compute = Compute(
            workspace_id=ws.id,
            name=name,
            type="amlcompute",
            location=location,
            size=SIZE,
            spec=spec_to_doc(parse_compute(doc)),
            created_by="test",
            provisioning_state="Succeeded",
            current_node_count=0,
            errors=[],
            warnings=[],
            created_on=now,
            last_modified_on=now,
        )
        session.add(compute)
        session.flush()
        if queued_jobs:
            session.execute(
                insert(Job),
                [
                    {
                        "workspace_id": ws.id,
                        "name": f"{name}-j{i}",
                        "compute_name": name,
                        "spec": {"command": "true", "compute": f"azureml:{name}"},
                        "status": "Queued",
                        "priority": 2,
                        "instance_count": 1,
                        "attempt": 0,
                        "max_attempts": 3,
                        "cancel_requested": False,
                        "created_by": "test",
                        "submitted_at": submitted_at + i * 1e-3,
                    }
                    for i in range(queued_jobs)
                ],
            )
        return compute.id
