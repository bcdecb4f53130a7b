"""A scale simulator: cloudlet's real scheduling, autoscaling, quota and node-lifecycle code driven
by a simulated clock and a simulated provider, so a month of cluster activity replays in seconds.

``Simulator`` (engine) runs reconcile passes like ``control.clusters.ClusterReconciler`` does —
record what the world did, schedule queued jobs onto idle nodes, decide, act — but over plain
in-memory records instead of the store, at the instants when something happens (event-driven).
``whatif`` replays a job trace (``trace``) for several cluster settings and prices the result.
"""

from cloudlet.sim.clock import SimClock
from cloudlet.sim.engine import ClusterSpec, JobSpec, Simulator
from cloudlet.sim.provider import SimulatedProvider

__all__ = ["ClusterSpec", "JobSpec", "SimClock", "SimulatedProvider", "Simulator"]
