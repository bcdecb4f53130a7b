"""What the online loop (``control/online_loop.py``) and the autoscaler
(``control/online_autoscaler.py``) need of the replica runtime that builds them
(``control/online_replicas.OnlineRuntime``), named here as protocols so that neither imports the
runtime: the runtime depends on them, not the other way round."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from cloudlet.control.online_placement import AgentHosts, Placement
    from cloudlet.control.online_state import DeploymentState, EndpointState, Replica
    from cloudlet.domain.endpoints import online_endpoints as rules
    from cloudlet.services.core.context import WorkspaceRef
    from cloudlet.store.schema import OnlineDeployment, OnlineEndpoint


class LeaseHolder(Protocol):
    """The loop as the autoscaler sees it: whether this server runs the replicas, where the
    autoscaled count is kept, and how a request held here reaches the server that runs them."""

    @property
    def leading(self) -> bool: ...

    def store_autoscaled(self, deployment_id: int, count: int) -> None: ...

    def signal_demand(self, deployment_id: int, for_s: float) -> None: ...


class ReplicaRuntime(Protocol):
    """The runtime's state and the operations the loop and the autoscaler call."""

    installation: str
    endpoints: dict[tuple[int, str], EndpointState]
    paths: dict[tuple[str, str, str, str], tuple[int, str]]
    lock: threading.Lock
    stopping: threading.Event
    hosts: AgentHosts
    rolling: dict[int, int]

    @property
    def loop(self) -> LeaseHolder: ...

    def in_flight(self, deployment: DeploymentState) -> int: ...

    def watch_once(self) -> None: ...

    def sync_endpoint(self, row: OnlineEndpoint, ref: WorkspaceRef | None = None) -> None: ...

    def deploy(self, endpoint: OnlineEndpoint, row: OnlineDeployment, ref: WorkspaceRef) -> None: ...

    def start_replica(
        self,
        spec: rules.DeploymentSpec,
        code_dir: Path,
        model_dir: Path,
        log_path: Path,
        placement: Placement | None = None,
    ) -> Replica: ...

    def retire(self, replicas: list[Replica], drain_s: float = ...) -> None: ...
