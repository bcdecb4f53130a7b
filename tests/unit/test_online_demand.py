"""A request held by a server that does not hold the online lease, for a deployment at zero
replicas (``control/online_serving.py``): that server's autoscaler tells the holder (once per half
of the hold's bound), and the holder's pass counts it as held there, so its autoscaler starts a
replica. No I/O: a runtime double; the two-server run is ``tests/integration/test_online_lease.py``."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from cloudlet.control.online_autoscaler import Autoscaler
from cloudlet.control.online_loop import Desired, OnlineLoop
from cloudlet.control.online_serving import Elsewhere, demand_left
from cloudlet.control.online_state import DeploymentState, Replica
from cloudlet.domain.endpoints import online_endpoints as rules
from tests.unit.test_online_endpoints import DEPLOYMENT

SCALED = {
    **DEPLOYMENT,
    "scale_settings": {
        "type": "target_utilization",
        "min_instances": 0,
        "max_instances": 2,
        "target_concurrent_requests": 1,
        "polling_interval": 1,
        "window": 1,
    },
    "request_settings": {"request_timeout_ms": 10_000},
}


class Runtime:
    """What the autoscaler and the loop touch of the replica runtime."""

    def __init__(self, leading: bool) -> None:
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.endpoints: dict[tuple[int, str], Any] = {}
        self.told: list[tuple[int, float]] = []
        self.started = 0
        self.loop = SimpleNamespace(
            leading=leading,
            signal_demand=lambda deployment_id, for_s: self.told.append((deployment_id, for_s)),
            store_autoscaled=lambda deployment_id, count: None,
        )

    def in_flight(self, deployment: DeploymentState) -> int:
        return 0

    def start_replica(self, *_: Any) -> Replica:
        self.started += 1
        return Replica(9000 + self.started, Elsewhere(), Path(os.devnull))  # type: ignore[arg-type]


def _deployment(runtime: Runtime) -> DeploymentState:
    deployment = DeploymentState(7, "blue", rules.parse_deployment(SCALED, "ep1"))
    deployment.code_dir = deployment.model_dir = Path(os.devnull)
    runtime.endpoints[(1, "ep1")] = SimpleNamespace(deployments={"blue": deployment})
    return deployment


def test_a_server_that_does_not_run_the_replicas_tells_the_holder_of_a_held_request() -> None:
    runtime = Runtime(leading=False)
    deployment = _deployment(runtime)
    scaler = Autoscaler(runtime)  # type: ignore[arg-type]
    scaler.tell_the_holder(100.0)
    assert runtime.told == []  # nothing held: nothing to tell
    deployment.waiting = 1
    scaler.tell_the_holder(100.0)
    scaler.tell_the_holder(104.9)  # within half of the 10 s bound: told already
    assert runtime.told == [(7, 10.0)]
    scaler.tell_the_holder(105.0)
    assert runtime.told == [(7, 10.0), (7, 10.0)]
    deployment.replicas = [Replica(9001, Elsewhere(), Path(os.devnull))]  # type: ignore[arg-type]
    scaler.tell_the_holder(200.0)  # a replica serves it: the gateway does not hold
    assert len(runtime.told) == 2


def test_the_holder_counts_another_servers_held_request_and_starts_a_replica() -> None:
    runtime = Runtime(leading=True)
    deployment = _deployment(runtime)
    loop = OnlineLoop.__new__(OnlineLoop)  # only take_demand: it reads the rows and the runtime
    loop.runtime = runtime  # type: ignore[assignment]
    now = time.time()
    rows = [SimpleNamespace(id=7, demand_until=now + 5), SimpleNamespace(id=8, demand_until=now - 1)]
    assert demand_left(rows, now) == {7: 5.0}  # type: ignore[arg-type]
    loop.take_demand(Desired(deployments={1: rows}))  # type: ignore[dict-item]
    assert deployment.demand_until > time.monotonic() + 4
    Autoscaler(runtime).tick(deployment, time.monotonic())  # type: ignore[arg-type]
    assert runtime.started == 1 and len(deployment.replicas) == 1
