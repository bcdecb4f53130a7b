"""What the gateway knows of each online endpoint and its deployments' replicas (issue 14): the
in-memory shapes the runtime (``control/online_replicas.py``) fills where it runs the replicas, and
a server or worker that does not fills from the lease holder's report (``control/online_serving.py``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cloudlet.control.online_placement import Placement
from cloudlet.control.replica_hosts import ReplicaProcess
from cloudlet.domain.endpoints import online_endpoints as rules
from cloudlet.services.endpoints.online_metrics import Counts, LatencySamples, latency_samples


@dataclass
class Replica:
    port: int
    proc: ReplicaProcess  # a local process, or one a node's agent runs (control/replica_hosts.py)
    log_path: Path
    host: str = "127.0.0.1"
    ready: bool = False
    code_dir: Path | None = None  # what a restart needs
    model_dir: Path | None = None
    retired: bool = False
    started: float = field(default_factory=time.monotonic)
    next_probe: float = 0.0
    failures: int = 0  # liveness probes failed in a row
    in_flight: int = 0  # requests the gateway has sent it and not had answered

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        self.proc.stop()


@dataclass
class DeploymentState:
    """One deployment as the gateway sees it: its serving replicas and its counters."""

    id: int
    name: str
    spec: rules.DeploymentSpec
    placement: Placement | None = None  # where its replicas run
    generation: int = 0
    replicas: list[Replica] = field(default_factory=list)
    in_flight: int = 0
    requests: int = 0
    failures: int = 0
    latency_ms: float = 0.0
    recent: LatencySamples = field(default_factory=latency_samples)  # (wall time, ms) of the last requests
    reason: str | None = None  # why none is ready, when none is
    log_path: Path | None = None
    next: int = 0  # round robin
    restarts: int = 0
    # what autoscale (control/online_autoscaler.py) needs to start and judge replicas
    code_dir: Path | None = None
    model_dir: Path | None = None
    started: int = 0  # replicas ever started in this generation (names their logs)
    waiting: int = 0  # requests the gateway holds until a replica is ready (scale from zero)
    # The holder: until when (monotonic) another server holds a request for it (online_serving);
    # another server: until when the holder has been told of this one's held requests.
    demand_until: float = 0.0
    demand_told_until: float = 0.0
    samples: list[Any] = field(default_factory=list)
    next_sample: float = 0.0
    flushed: Counts = field(default_factory=Counts)  # what the store has of this worker's counts

    def counted(self) -> Counts:
        return Counts(self.requests, self.failures, self.latency_ms)

    def ready(self) -> list[Replica]:
        return [r for r in self.replicas if r.ready and r.proc.poll() is None]

    def pick(self) -> Replica | None:
        ready = self.ready()
        if not ready:
            return None
        self.next = (self.next + 1) % len(ready)
        return ready[self.next]

    def live(self, metrics: Counts | None = None) -> dict[str, Any]:
        """What ``show`` says of it; METRICS: the deployment's (every worker's), else this one's."""
        counts = metrics or self.counted()
        return {
            "replicas": [
                {
                    "host": r.host,
                    "port": r.port,
                    "node": getattr(r.proc, "node_id", None),
                    "ready": r.ready,
                    "alive": r.proc.poll() is None,
                }
                for r in self.replicas
            ],
            "ready_replicas": len(self.ready()),
            "serving_generation": self.generation,
            "restarts": self.restarts,
            "waiting": self.waiting,
            "metrics": {
                "requests": counts.requests,
                "failures": counts.failures,
                "in_flight": self.in_flight,
                "mean_latency_ms": round(counts.latency_ms / counts.requests, 3) if counts.requests else None,
            },
        }


@dataclass
class EndpointState:
    id: int
    ws_id: int
    name: str
    auth_mode: str
    primary: str
    secondary: str
    traffic: dict[str, int]
    mirror: dict[str, int]
    deployments: dict[str, DeploymentState] = field(default_factory=dict)
