"""``SimulatedProvider``: the ``NodeProvider`` interface over a simulated clock.

A real provider starts a machine whose agent dials the server some time later; this one records
the machine and tells the simulator when its agent will have registered (now + boot delay).
"""

from __future__ import annotations

from collections.abc import Callable

from cloudlet.providers.base import NodeHandle, NodeRequest, ProviderError
from cloudlet.sim.clock import SimClock

BootCallback = Callable[[NodeHandle, float], None]


class SimulatedProvider:
    kind = "simulated"

    def __init__(self, clock: SimClock, boot_delay_s: float, on_booted: BootCallback) -> None:
        if boot_delay_s < 0:
            raise ValueError("boot_delay_s cannot be negative")
        self.clock = clock
        self.boot_delay_s = boot_delay_s
        self.on_booted = on_booted
        self._machines: dict[str, tuple[str, NodeHandle]] = {}  # node id -> (installation, handle)
        self.created = 0
        self.terminated = 0

    def create(self, req: NodeRequest) -> NodeHandle:
        if req.node_id in self._machines:
            raise ProviderError(f"node {req.node_id} already exists")
        handle = NodeHandle(req.node_id, {"simulated": True, "created_at": self.clock.now})
        self._machines[req.node_id] = (req.installation_id, handle)
        self.created += 1
        self.on_booted(handle, self.clock.now + self.boot_delay_s)
        return handle

    def terminate(self, handle: NodeHandle) -> None:
        if self._machines.pop(handle.node_id, None) is not None:
            self.terminated += 1

    def list_nodes(self, installation_id: str) -> list[NodeHandle]:
        return [h for inst, h in self._machines.values() if inst == installation_id]

    def alive(self, node_id: str) -> bool:
        return node_id in self._machines
