"""The node provider interface (Libcloud-like): create, terminate, list.

A provider turns a `NodeRequest` into a machine running `python -m cloudlet.agent` with the
environment of docs/agent-protocol.md. Everything a provider makes is tagged with the
installation id, so `list_nodes` finds orphans after a crash. Optional abilities are separate
protocols (check with `isinstance(provider, SupportsResourceLimits)`): the small `NodeProvider`
is all a provider must do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from cloudlet.domain.compute.quota import Tier


class ProviderError(Exception):
    """The provider could not carry out a request (the message names the cause)."""


@dataclass(frozen=True)
class ProviderContext:
    """What the server knows that a provider may need (``providers/registry.py`` hands it to each
    kind's factory): its home (the local provider's nodes live under it by default) and its
    installation id (every node is tagged with it)."""

    home: Path
    installation_id: str = ""
    # SSH providers: where host keys learned on first use are kept (``services/compute/host_keys.py``'s
    # HostKeyBook; None: in memory only) and the scope they are kept under (the location's name).
    host_keys: Any = None
    scope: str = ""


@dataclass(frozen=True)
class NodeRequest:
    node_id: str
    token: str
    installation_id: str
    server_url: str
    size: str
    vcpus: float
    memory_gb: float
    gpus: int = 0
    tier: str = Tier.DEDICATED.value  # a ``Tier`` value
    node_root: Path | None = None  # where node directories live; None = the provider's default
    env: dict[str, str] = field(default_factory=dict)  # extra agent environment (e.g. CLOUDLET_CA_FILE)


@dataclass
class NodeHandle:
    node_id: str
    provider_ref: dict[str, Any] = field(default_factory=dict)  # JSON-able: pids, dirs, cloud ids

    def to_json(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "provider_ref": self.provider_ref}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NodeHandle:
        return cls(node_id=str(data["node_id"]), provider_ref=dict(data.get("provider_ref") or {}))


@runtime_checkable
class NodeProvider(Protocol):
    kind: str

    def create(self, req: NodeRequest) -> NodeHandle:
        """Start a node whose agent will dial the server. Raises ProviderError."""
        ...

    def terminate(self, handle: NodeHandle) -> None:
        """Stop the node and free what it holds; idempotent (a gone node is not an error)."""
        ...

    def list_nodes(self, installation_id: str) -> list[NodeHandle]:
        """Every live node tagged with this installation, including ones nobody has recorded."""
        ...


@runtime_checkable
class SupportsResourceLimits(Protocol):
    """The provider enforces the size's CPU and memory (not just reports them)."""

    def resource_limits(self, handle: NodeHandle) -> dict[str, Any] | None:
        """The limits in force (e.g. {"cpu_quota_us", "cpu_period_us", "memory_bytes"}), or None."""
        ...


@runtime_checkable
class SupportsNodeLogs(Protocol):
    """The provider can show a node's agent log (for setup failures and post-mortems)."""

    def node_log(self, handle: NodeHandle, tail_bytes: int = 65536) -> str: ...


# What a provider that keeps OS disks on its hosts reads from a node's request (HostsInstanceDisks):
HOST_DISK_ENV = "CLOUDLET_INSTANCE_DISK"  # the OS disk's name on the host
HOST_SHARE_ENV = "CLOUDLET_INSTANCE_SHARE"  # the workspace's share folder's name on the host
HOST_SHARE_USER_ENV = "CLOUDLET_INSTANCE_SHARE_USER"  # the owner's folder in it
PIN_HOST_ENV = "CLOUDLET_INSTANCE_HOST"  # the host the disk is on (the previous node's): start there


@runtime_checkable
class HostsInstanceDisks(Protocol):
    """The provider keeps a compute instance's OS disk on the machine its node runs on (an SSH
    host), not on the control plane's: the request names the disk (``CLOUDLET_INSTANCE_DISK``,
    ``services/compute/instances.py``), the provider puts it on the host and starts the instance's next
    node on the host its disk is on (``CLOUDLET_INSTANCE_HOST``, the previous node's ``host``)."""

    def remove_instance_disk(self, disk: str, host: str) -> None:
        """Delete the OS disk ``disk`` on ``host`` (instance delete); a missing one is fine."""
        ...


@dataclass(frozen=True)
class Capacity:
    """What an engine offers this installation now, its nodes in use included."""

    vcpus: float
    memory_gb: float
    gpus: float = 0.0


@runtime_checkable
class CapacityOwner(Protocol):
    """An engine that owns its capacity (Slurm, Kubernetes): the autoscaler asks it how much it
    will give, instead of trusting the location's stored capacity (``providers/capacity.py``)."""

    def capacity(self) -> Capacity:
        """The engine's offer now; raises ProviderError when it cannot say."""
        ...


@dataclass(frozen=True)
class NodeStatus:
    """What an engine says of a node's machine beyond "it exists" (``SupportsNodeStatus``):
    ``pending`` (the engine has not given it resources yet; ``message`` says why, in the engine's
    words), ``running``, or ``preempted`` (the engine took it back: cloudlet evicts the node and
    requeues its jobs, as for its own low-priority eviction)."""

    phase: str  # "pending" | "running" | "preempted"
    message: str = ""
    reason: str = ""  # the engine's own reason code (Slurm: Resources, Priority, QOS...)


@runtime_checkable
class SupportsNodeStatus(Protocol):
    """The provider's listing says more than presence (a batch engine queues, preempts)."""

    def node_status(self, handle: NodeHandle) -> NodeStatus | None:
        """The status of a node from a handle its ``list_nodes`` returned (pure: no call)."""
        ...
